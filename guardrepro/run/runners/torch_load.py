"""Loading a checkpoint into a transformers causal LM for a runner: the part
every torch-based backend shares (hf, and a backend added by
docs/CONTRIBUTING.md's recipe).

Input: a verified local checkpoint directory and the backend's checked
options; the keys read are ``dtype`` (float32 | bfloat16 | float16),
``device``, ``threads`` (an integer, ``"auto"`` = ``workers.auto_threads(1)``,
or None: torch's own) and ``attn_implementation`` (default ``"sdpa"``); a
backend that declares fewer keys gets these defaults. Output: a
``LoadedModel``: the model in eval mode on its device, the device, the dtype,
and the torch thread count to restore on ``close``. ``open_checkpoint`` does
every step but the model's load, which ``LoadedModel.load_model`` does when
it is needed (the lean decoder reads the weights itself:
``runners.lean_weights``).

Invariants: safetensors only (``weights.require_safetensors``, before
transformers reads a byte), ``use_safetensors=True``, ``local_files_only``,
``trust_remote_code=False``. The checkpoint's ``generation_config.json``
never reaches decoding: ``model.generation_config`` is replaced by a pristine
``GenerationConfig`` (transformers would fill every unset generation setting
from it). transformers' own loading bar is off while loading (it would
interleave with the run's bar). A load error is an ``InputError`` naming the
directory. The thread count is a process-wide torch setting: logged, never
part of the provenance (threads change no token, docs/PROTOCOL.md).
"""

from __future__ import annotations

import logging
import os
import resource
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.utils import logging as hf_logging

from guardrepro.errors import InputError
from guardrepro.run.runners.weights import require_safetensors

log = logging.getLogger(__name__)

DTYPES: Mapping[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass
class LoadedModel:
    """A checkpoint opened by ``open_checkpoint`` (see the module docstring)."""

    model: Any
    device: torch.device
    dtype: torch.dtype
    threads_before: int
    checkpoint_dir: Path
    files: list[Path]  # the verified safetensors
    attn_implementation: str

    def load_model(self) -> Any:
        """The transformers model, loaded on first call (see the module docstring)."""
        if self.model is not None:
            return self.model
        bars_on = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(self.checkpoint_dir),
                dtype=self.dtype,
                use_safetensors=True,
                trust_remote_code=False,
                local_files_only=True,
                attn_implementation=self.attn_implementation,
            )
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot load the checkpoint with transformers: {exc}",
                             file=str(self.checkpoint_dir)) from exc
        finally:
            if bars_on:
                hf_logging.enable_progress_bar()
        loaded = cast(Any, model).to(self.device).eval()
        loaded.generation_config = GenerationConfig()
        self.model = loaded
        return loaded

    def sync(self) -> None:
        """Wait for the device's queued work (CUDA), so that a clock read after
        it measures the work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def peak_memory(self) -> int:
        """``torch.cuda.max_memory_allocated`` on CUDA, else the process's peak
        resident set size in bytes (``getrusage``)."""
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)

    def close(self) -> None:
        """Release the model and restore torch's thread count."""
        torch.set_num_threads(self.threads_before)
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _threads(value: Any) -> int | None:
    if value == "auto":
        from guardrepro.run.workers import auto_threads

        return auto_threads(1)
    return None if value is None else int(value)


def open_checkpoint(checkpoint_dir: Path, options: Mapping[str, Any], *,
                    backend: str) -> LoadedModel:
    """Verify ``checkpoint_dir``'s safetensors and set the threads for runner
    ``backend``; the model is not loaded yet (see the module docstring)."""
    checkpoint_dir = Path(checkpoint_dir)
    files = require_safetensors(checkpoint_dir, backend)
    threads_before = torch.get_num_threads()
    threads = _threads(options.get("threads"))
    if threads is not None:
        torch.set_num_threads(threads)
    log.info("%s runner (pid %d): %d torch thread(s)", backend, os.getpid(),
             torch.get_num_threads())
    return LoadedModel(None, torch.device(options.get("device", "cpu")),
                       DTYPES[options.get("dtype", "float32")], threads_before,
                       checkpoint_dir, files, options.get("attn_implementation", "sdpa"))


def load_causal_lm(checkpoint_dir: Path, options: Mapping[str, Any], *,
                   backend: str) -> LoadedModel:
    """Load ``checkpoint_dir`` for runner ``backend`` (see the module docstring)."""
    loaded = open_checkpoint(checkpoint_dir, options, backend=backend)
    try:
        loaded.load_model()
    except InputError:
        torch.set_num_threads(loaded.threads_before)
        raise
    return loaded
