"""Where the shipped spec folders are, and how a bare spec name finds its file.

Input: a spec argument as typed on the command line (a path, or a bare name such
as ``toy-hf``) and the folder it belongs to (``locks``, ``runners``, ``cohorts``,
``checks``, ``quantize``, ``notebooks``). Output: the file's path.

The spec folders are edited at the top of a source checkout; a wheel ships the
same files as package data under ``guardrepro/specs/<folder>/`` (setup.py maps
them there at build time, nothing is copied in the tree). ``spec_root`` is the
checkout root when the package is imported from one (its ``pyproject.toml`` and
spec folders sit next to the package), else the installed ``guardrepro/specs``.
Relative references inside specs (``../locks/toy-guard.toml``) hold in both
layouts because the folders keep their relative places.

Invariants: an existing path always wins over a bare name; a bare name is looked
up as ``<root>/<folder>/<name>``, then with ``.toml`` (or ``.py`` for notebooks)
appended; a name without a suffix that matches nothing is an InputError listing
what exists (one with a suffix is returned as the path it looks like).
"""

from __future__ import annotations

from pathlib import Path

from guardrepro.errors import InputError

FOLDERS = ("locks", "runners", "cohorts", "checks", "quantize", "notebooks", "guards")
SUFFIX = {"notebooks": ".py"}


def _package_dir() -> Path:
    return Path(__file__).resolve().parent


def spec_root() -> Path:
    """The directory holding the spec folders (checkout root or installed specs)."""
    checkout = _package_dir().parent
    if (checkout / "pyproject.toml").is_file() and all(
        (checkout / name).is_dir() for name in ("locks", "runners", "cohorts")
    ):
        return checkout
    shipped = _package_dir() / "specs"
    if (shipped / "locks").is_dir():
        return shipped
    raise InputError(
        f"the spec folders ({', '.join(FOLDERS)}) are neither in a source checkout at"
        f" {checkout} nor shipped in the package at {shipped}; reinstall guardrepro"
    )


def spec_path(value: str | Path, folder: str) -> Path:
    """``value`` if it names an existing file, else the shipped spec of that name."""
    path = Path(value)
    if path.exists() or "/" in str(value) or folder.split("/")[0] not in FOLDERS:
        return path
    base = spec_root() / folder
    suffix = SUFFIX.get(folder.split("/")[0], ".toml")
    for candidate in (base / str(value), base / f"{value}{suffix}"):
        if candidate.is_file():
            return candidate
    if path.suffix:  # looks like a file name: the verb says the file is missing
        return path
    names = sorted(p.stem for p in base.glob(f"*{suffix}"))
    raise InputError(
        f"no file {value!r} and no shipped {folder} spec of that name (in {base}: "
        f"{', '.join(names) or 'none'})"
    )
