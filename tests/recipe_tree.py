"""A copy of the project tree for the "files a recipe touches" tests: copy the
named top-level entries, follow a recipe in the copy, then list what differs."""

from __future__ import annotations

import filecmp
import shutil
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = ("__pycache__", ".pytest_cache")


def copy_tree(dest: Path, names: Iterable[str]) -> Path:
    """``dest`` holding a copy of each named entry of the checkout (caches left out)."""
    ignore = shutil.ignore_patterns(*SKIPPED, "*.pyc")
    for name in names:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)
    return dest


def _files(tree: Path) -> dict[str, Path]:
    return {p.relative_to(tree).as_posix(): p for p in tree.rglob("*")
            if p.is_file() and not any(part in SKIPPED for part in p.parts)}


def changed_files(before: Path, after: Path) -> set[str]:
    """Relative paths added, removed or changed (by content) from ``before`` to ``after``."""
    old, new = _files(before), _files(after)
    out = set(old.keys() ^ new.keys())
    out.update(rel for rel in old.keys() & new.keys()
               if not filecmp.cmp(old[rel], new[rel], shallow=False))
    return out
