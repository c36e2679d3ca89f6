"""Backend name -> descriptor -> runner class: the one place backends are
registered, and the tables derived from their descriptors.

Input: a backend name from a run profile (looked up once, ``backend_of``),
a ``backends.Backend`` (to register, or as looked up), the local checkpoint
directory, the profile's ``[backend_options]`` table and what the prompt
tokenizer knows (EOS ids, pad id, a decode function). Output: the backend's
descriptor (``backend_of``; its option table is ``descriptor.options``) and a
loaded ``Runner`` (``create_runner``).

A name is looked up once, with ``backend_of`` (for a run, when the profile is
read: ``RunProfile.descriptor``); from there the descriptor itself is passed
down: every other function here takes a descriptor, never a name.

Registration: the built-in descriptors (``backends.BUILTIN``) are registered
at import, then the ``DESCRIPTOR`` of every module ``runners/<name>_backend.py``
(a backend added by docs/CONTRIBUTING.md's recipe: its descriptor and its
runner class in one module, which imports its libraries inside the runner, so
that importing it costs nothing), in the order of their names, in every
process (a spawned worker too); ``register(descriptor)`` adds another (a plugin, a test) to this
process, ``unregister(name)`` removes it. ``RUNNERS`` (class path),
``DEPENDENCIES`` (top-level modules), ``EXTRAS`` (pip extra) and ``PACKAGES``
(the distributions ``doctor`` reports) are read-only views of the registered
descriptors, so they cannot disagree with them. A backend registered at run
time exists in this process only: worker processes started by ``spawn`` see
the built-in and the ``*_backend.py`` ones.

Constructor contract every runner class implements::

    class SomeRunner:
        backend: str                      # its descriptor's name (the descriptor
                                          # holds its option table)

        def __init__(
            self,
            checkpoint_dir: Path,             # verified local directory (safetensors,
                                              # config.json, tokenizer files); "." when
                                              # the backend needs no model
            options: Mapping[str, Any],       # the profile's [backend_options] table
            *,
            eos_token_ids: Sequence[int],     # stop on any of these (TS-Guard: 151645, 151643)
            pad_token_id: int | None,         # for left padding when batching
            decode: Callable[[Sequence[int]], str],  # the project's tokenizer decode; every
                                              # backend turns token ids into text with it
        ) -> None: ...

- ``options`` has been checked against the descriptor's table by ``create_runner``
  (a key it does not define or a bad value raises
  ``InputError(field="backend_options.<key>")``) and filled with its defaults: a
  ``CheckedOptions``, which ``OptionTable.check`` returns as it is, so a runner may
  call ``DESCRIPTOR.options.check(options)`` (needed when it is built directly) at no
  cost. What the table cannot say (a device that must exist) the runner checks.
- The runner loads local files only (no hub access, no remote code) and
  raises ``InferenceError`` for a failure that concerns a request rather than
  the configuration.
- ``Generation.token_ids`` holds every generated id including the EOS id that
  stopped it; ``Generation.text`` is ``decode`` of the ids without that final
  EOS; ``step_margins`` is aligned with ``token_ids`` and computed from the raw
  logits (before temperature or any processor). ``Generation.from_tokens``
  builds exactly that from the generated ids.
- ``describe()`` must be deterministic for a given configuration (it is hashed
  into the run's provenance).

A typo in the backend name raises ``InputError`` suggesting the closest name;
a missing dependency raises ``DependencyMissingError`` naming the extra.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from guardrepro.errors import DependencyMissingError, InputError, missing_extra
from guardrepro.run.runners.backends import BUILTIN, Backend
from guardrepro.run.runners.base import Runner

T = TypeVar("T")
_REGISTERED: dict[str, Backend] = {}


class _Derived(Mapping[str, T], Generic[T]):
    """A read-only view: backend name -> one field of its registered descriptor."""

    def __init__(self, read: Callable[[Backend], T]) -> None:
        self._read = read

    def __getitem__(self, name: str) -> T:
        return self._read(_REGISTERED[name])

    def __iter__(self) -> Iterator[str]:
        return iter(list(_REGISTERED))

    def __len__(self) -> int:
        return len(_REGISTERED)

    def __repr__(self) -> str:
        return repr(dict(self))


RUNNERS: Mapping[str, str] = _Derived(lambda b: b.runner)
DEPENDENCIES: Mapping[str, tuple[str, ...]] = _Derived(lambda b: b.modules)
EXTRAS: Mapping[str, str] = _Derived(lambda b: b.extra)
PACKAGES: Mapping[str, tuple[str, ...]] = _Derived(lambda b: b.packages)


def register(descriptor: Backend) -> Backend:
    """Make ``descriptor`` a backend of this process; a name already registered
    (or a table for another backend) is an ``InputError``."""
    if descriptor.name in _REGISTERED:
        raise InputError(f"backend {descriptor.name!r} is already registered", field="backend")
    if descriptor.options.backend != descriptor.name:
        raise InputError(f"backend {descriptor.name!r} declares the option table of "
                         f"{descriptor.options.backend!r}", field="backend")
    _REGISTERED[descriptor.name] = descriptor
    return descriptor


def unregister(name: str) -> None:
    """Remove a backend registered with ``register`` (a built-in one too)."""
    _check_name(name)
    del _REGISTERED[name]


def _discover() -> tuple[Backend, ...]:
    """The ``DESCRIPTOR`` of each module ``runners/<name>_backend.py``, by name."""
    found = []
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]))
    for name in names:
        if name.endswith("_backend"):
            module = importlib.import_module(f"{__package__}.{name}")
            descriptor = getattr(module, "DESCRIPTOR", None)
            if not isinstance(descriptor, Backend):
                raise InputError(f"{module.__file__}: a backend module defines DESCRIPTOR, "
                                 "a runners.backends.Backend", field="DESCRIPTOR")
            found.append(descriptor)
    return tuple(found)


for _builtin in (*BUILTIN, *_discover()):
    register(_builtin)


def _check_name(backend: str, *, file: str | None = None) -> None:
    if backend not in _REGISTERED:
        close = difflib.get_close_matches(backend, list(_REGISTERED), n=1, cutoff=0.3)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InputError(
            f"unknown backend {backend!r} (known: {', '.join(_REGISTERED)}){hint}",
            file=file, field="backend",
        )


def backend_of(name: str, *, file: str | None = None) -> Backend:
    """The registered descriptor of backend ``name`` (``InputError`` naming
    ``file`` and field ``backend`` when there is none)."""
    _check_name(name, file=file)
    return _REGISTERED[name]


def registered() -> tuple[Backend, ...]:
    """The registered descriptors, in registration order."""
    return tuple(_REGISTERED.values())


def _missing(descriptor: Backend, exc: ImportError) -> DependencyMissingError | None:
    """A DependencyMissingError when ``exc`` is one of the backend's optional deps."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if name not in descriptor.modules:
        return None
    return missing_extra(f"backend {descriptor.name!r}", name, descriptor.extra)


def chunk_size(descriptor: Backend, options: Mapping[str, Any]) -> int:
    """Requests per ``generate`` call: option ``batch_size``, else its declared
    default; 1 for a backend that declares no ``batch_size``."""
    table = descriptor.options
    if "batch_size" not in table.names:
        return 1
    return int(table.value(options, "batch_size"))


def runner_class(descriptor: Backend) -> type[Any]:
    """Import and return the runner class of ``descriptor``."""
    module_name, attr = descriptor.runner.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = _missing(descriptor, exc)
        if missing is not None:
            raise missing from exc
        raise
    cls = getattr(module, attr)
    assert isinstance(cls, type)
    return cls


def preload(descriptor: Backend, checkpoint_dir: str | Path,
            options: Mapping[str, Any]) -> None:
    """Import the runner of ``descriptor`` and what loading ``checkpoint_dir``
    with ``options`` will import (the runner module's optional
    ``preload(checkpoint_dir, options)``; hf: the model's modelling modules), so
    that processes forked afterwards inherit it."""
    runner_class(descriptor)
    module_name = descriptor.runner.split(":", 1)[0]
    hook = getattr(importlib.import_module(module_name), "preload", None)
    if callable(hook):
        hook(Path(checkpoint_dir), options)


def create_runner(
    descriptor: Backend,
    checkpoint_dir: str | Path,
    options: Mapping[str, Any],
    *,
    eos_token_ids: Sequence[int],
    pad_token_id: int | None,
    decode: Callable[[Sequence[int]], str],
) -> Runner:
    """Load the runner of ``descriptor`` on ``checkpoint_dir`` (see the module
    docstring). Options already checked against the descriptor's table (a
    ``CheckedOptions``: a profile's, checked when it was read) pass through;
    others are checked here. The runner receives them filled (``CheckedOptions``,
    which its own ``check`` passes through)."""
    checked = descriptor.options.check(options)
    cls = runner_class(descriptor)
    try:
        runner = cls(
            Path(checkpoint_dir),
            checked,
            eos_token_ids=tuple(eos_token_ids),
            pad_token_id=pad_token_id,
            decode=decode,
        )
    except ImportError as exc:  # a backend that imports its dependencies lazily
        missing = _missing(descriptor, exc)
        if missing is not None:
            raise missing from exc
        raise
    assert isinstance(runner, Runner)
    return runner
