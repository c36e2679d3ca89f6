"""Loading a checkpoint into a transformers causal LM for a runner: the part
every torch-based backend shares (hf, and a backend added by
docs/CONTRIBUTING.md's recipe).

Input: a verified local checkpoint directory and the backend's checked
options; the keys read are ``dtype`` (float32 | bfloat16 | float16),
``device``, ``threads`` (an integer, ``"auto"`` = ``workers.auto_threads(1)``,
or None: torch's own) and ``attn_implementation`` (default ``"sdpa"``); a
backend that declares fewer keys gets these defaults. Output: a
``LoadedModel``: the model in eval mode on its device, the device, the dtype,
and the torch thread count to restore on ``close``.

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
    """A causal LM loaded by ``load_causal_lm`` (see the module docstring)."""

    model: Any
    device: torch.device
    dtype: torch.dtype
    threads_before: int

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


def load_causal_lm(checkpoint_dir: Path, options: Mapping[str, Any], *,
                   backend: str) -> LoadedModel:
    """Load ``checkpoint_dir`` for runner ``backend`` (see the module docstring)."""
    checkpoint_dir = Path(checkpoint_dir)
    require_safetensors(checkpoint_dir, backend)
    threads_before = torch.get_num_threads()
    threads = _threads(options.get("threads"))
    if threads is not None:
        torch.set_num_threads(threads)
    log.info("%s runner (pid %d): %d torch thread(s)", backend, os.getpid(),
             torch.get_num_threads())
    device = torch.device(options.get("device", "cpu"))
    dtype = DTYPES[options.get("dtype", "float32")]
    bars_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(checkpoint_dir),
            dtype=dtype,
            use_safetensors=True,
            trust_remote_code=False,
            local_files_only=True,
            attn_implementation=options.get("attn_implementation", "sdpa"),
        )
    except (OSError, ValueError) as exc:
        torch.set_num_threads(threads_before)
        raise InputError(f"cannot load the checkpoint with transformers: {exc}",
                         file=str(checkpoint_dir)) from exc
    finally:
        if bars_on:
            hf_logging.enable_progress_bar()
    loaded = cast(Any, model).to(device).eval()
    loaded.generation_config = GenerationConfig()
    return LoadedModel(loaded, device, dtype, threads_before)
