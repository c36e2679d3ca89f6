"""Build configuration that pyproject.toml cannot express: ship the spec folders.

The top-level ``locks/``, ``runners/``, ``cohorts/``, ``checks/``, ``quantize/`` and
``notebooks/`` folders stay the editable source of truth; at build time each folder
(and each subfolder) is mapped onto a data package ``guardrepro.specs.<folder>``, so
a wheel installs them under ``guardrepro/specs/`` with their relative places kept
(``runners/toy-hf.toml`` still finds ``../locks/toy-guard.toml``). Nothing is copied
in the tree. ``guardrepro.spec_dirs.spec_root`` finds them; tests/test_wheel.py checks
that the wheel holds exactly the tracked files of these folders.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
SPEC_FOLDERS = ("locks", "runners", "cohorts", "checks", "quantize", "notebooks", "guards")
SKIP = ("__pycache__", ".ipynb_checkpoints")


def spec_packages() -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    """Package names, their source folders and their data globs for the spec folders."""
    names, dirs, data = [], {}, {}
    for folder in SPEC_FOLDERS:
        top = ROOT / folder
        subdirs = [top, *sorted(p for p in top.rglob("*") if p.is_dir())]
        for path in subdirs:
            rel = path.relative_to(ROOT)
            if any(part in SKIP or part.startswith(".") for part in rel.parts):
                continue
            name = "guardrepro.specs." + ".".join(rel.parts)
            names.append(name)
            dirs[name] = rel.as_posix()
            data[name] = ["*.toml", "*.json", "*.jsonl", "*.py", "*.md", "*.txt"]
    return names, dirs, data


def data_packages() -> dict[str, list[str]]:
    """The package's own data folders (the toy guard, the toy bench, the toy
    reference run, the report template), each declared as a package of data so
    that setuptools ships them without warning that they are not packages."""
    folders = [ROOT / "guardrepro" / "templates",
               *sorted(p for p in (ROOT / "guardrepro" / "data").iterdir() if p.is_dir())]
    return {"guardrepro." + ".".join(p.relative_to(ROOT / "guardrepro").parts): ["**/*"]
            for p in folders}


names, dirs, data = spec_packages()
own = data_packages()
setup(
    packages=find_packages(include=["guardrepro*"]) + list(own) + names,
    package_dir={"": ".", **dirs},
    package_data={**own, **data},
)
