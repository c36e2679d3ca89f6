"""Which weight files a runner may load: safetensors only.

Input: a checkpoint directory. Output: its ``*.safetensors`` files, sorted.
Invariant: a directory without safetensors weights (e.g. only
``pytorch_model.bin``, a pickle) is refused with MissingArtifactError naming the
directory and what it holds, before any backend is imported or loads a byte; no
runner falls back to pickled weights. Every header is validated against its
file's size (``artifacts.safetensors_header``) before a backend sees it.
"""

from __future__ import annotations

from pathlib import Path

from guardrepro.artifacts.safetensors_header import check_safetensors
from guardrepro.errors import MissingArtifactError

PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def require_safetensors(checkpoint_dir: Path, backend: str) -> list[Path]:
    """The directory's ``*.safetensors`` files; MissingArtifactError when there are none."""
    found = sorted(checkpoint_dir.glob("*.safetensors"))
    if found:
        for path in found:  # a lying header is named here, not by the backend's loader
            check_safetensors(path)
        return found
    pickled = sorted({p.name for pattern in PICKLED for p in checkpoint_dir.glob(pattern)})
    held = (
        f" (it holds {', '.join(pickled[:3])}: pickled weights are never loaded)"
        if pickled
        else ""
    )
    raise MissingArtifactError(
        f"{checkpoint_dir}: no *.safetensors weights{held}; the {backend} runner loads"
        " safetensors only"
    )
