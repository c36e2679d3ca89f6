"""Backend name -> runner class, resolved lazily so that a missing optional
dependency only matters when that backend is asked for.

Input: a backend name from a run profile, the local checkpoint directory, the
profile's ``[backend_options]`` table and what the prompt tokenizer knows
(EOS ids, pad id, a decode function). Output: a loaded ``Runner``.

Constructor contract every runner class in ``RUNNERS`` implements::

    class SomeRunner:
        backend: str                      # "hf" | "mlx" | "vllm" | "rule" (no model)

        def __init__(
            self,
            checkpoint_dir: Path,             # verified local directory (safetensors,
                                              # config.json, tokenizer files)
            options: Mapping[str, Any],       # the profile's [backend_options] table
            *,
            eos_token_ids: Sequence[int],     # stop on any of these (TS-Guard: 151645, 151643)
            pad_token_id: int | None,         # for left padding when batching
            decode: Callable[[Sequence[int]], str],  # the project's tokenizer decode; every
                                              # backend turns token ids into text with it
        ) -> None: ...

- ``options`` is validated by the runner itself: a key it does not define or a bad value
  raises ``InputError(field="backend_options.<key>")``. Common keys: ``dtype``,
  ``device``, ``batch_size`` (requests per ``generate`` chunk).
- The class declares its options as ``OPTIONS`` (a ``runners.options.OptionTable``:
  names, types, defaults, help); ``option_table(backend)`` reads the same table
  without importing the runner, for ``doctor`` and the profile docs.
- The runner loads local files only (no hub access, no remote code) and
  raises ``InferenceError`` for a failure that concerns a request rather than
  the configuration.
- ``Generation.token_ids`` holds every generated id including the EOS id that
  stopped it; ``Generation.text`` is ``decode`` of the ids without that final
  EOS; ``step_margins`` is aligned with ``token_ids`` and computed from the raw
  logits (before temperature or any processor).
- ``describe()`` must be deterministic for a given configuration (it is hashed
  into the run's provenance).

A typo in the backend name raises ``InputError`` suggesting the closest name;
a missing dependency raises ``DependencyMissingError`` naming the extra.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from guardrepro.errors import DependencyMissingError, InputError, missing_extra
from guardrepro.run.runners.base import Runner
from guardrepro.run.runners.options import TABLES as OPTION_TABLES
from guardrepro.run.runners.options import OptionTable

RUNNERS: Mapping[str, str] = {
    "hf": "guardrepro.run.runners.hf_runner:HFRunner",
    "mlx": "guardrepro.run.runners.mlx_runner:MLXRunner",
    "vllm": "guardrepro.run.runners.vllm_runner:VLLMRunner",
    "rule": "guardrepro.run.runners.rule_runner:RuleRunner",
}
# Top-level modules each backend needs, and the extra that installs them.
DEPENDENCIES: Mapping[str, tuple[str, ...]] = {
    "hf": ("torch", "transformers", "safetensors", "tokenizers"),
    "mlx": ("mlx", "mlx_lm"),
    "vllm": ("vllm", "torch", "transformers"),
    "rule": (),
}
EXTRAS: Mapping[str, str] = {"hf": "hf", "mlx": "mlx", "vllm": "vllm", "rule": ""}


def _check_name(backend: str) -> None:
    if backend not in RUNNERS:
        close = difflib.get_close_matches(backend, list(RUNNERS), n=1, cutoff=0.3)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InputError(
            f"unknown backend {backend!r} (known: {', '.join(RUNNERS)}){hint}", field="backend"
        )


def _missing(backend: str, exc: ImportError) -> DependencyMissingError | None:
    """A DependencyMissingError when ``exc`` is one of ``backend``'s optional deps."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if name not in DEPENDENCIES[backend]:
        return None
    return missing_extra(f"backend {backend!r}", name, EXTRAS[backend])


def option_table(backend: str) -> OptionTable:
    """The options runner ``backend`` declares (its class's ``OPTIONS``), read
    from the declarations module: the runner and its dependencies are not
    imported."""
    _check_name(backend)
    return OPTION_TABLES[backend]


def chunk_size(backend: str, options: Mapping[str, Any]) -> int:
    """Requests per ``generate`` call: option ``batch_size``, else its declared default."""
    return int(option_table(backend).value(options, "batch_size"))


def runner_class(backend: str) -> type[Any]:
    """Import and return the runner class for ``backend``."""
    _check_name(backend)
    module_name, attr = RUNNERS[backend].split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = _missing(backend, exc)
        if missing is not None:
            raise missing from exc
        raise
    cls = getattr(module, attr)
    assert isinstance(cls, type)
    return cls


def create_runner(
    backend: str,
    checkpoint_dir: str | Path,
    options: Mapping[str, Any],
    *,
    eos_token_ids: Sequence[int],
    pad_token_id: int | None,
    decode: Callable[[Sequence[int]], str],
) -> Runner:
    """Load the ``backend`` runner on ``checkpoint_dir`` (see the module docstring)."""
    cls = runner_class(backend)
    try:
        runner = cls(
            Path(checkpoint_dir),
            options,
            eos_token_ids=tuple(eos_token_ids),
            pad_token_id=pad_token_id,
            decode=decode,
        )
    except ImportError as exc:  # a backend that imports its dependencies lazily
        missing = _missing(backend, exc)
        if missing is not None:
            raise missing from exc
        raise
    assert isinstance(runner, Runner)
    return runner
