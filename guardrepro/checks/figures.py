"""Figure plumbing shared by the report, the guard table and the sweep
outputs: matplotlib on the Agg backend (an error naming the ``report`` extra
when it is missing) and PNG files written with the package's atomic writer.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.errors import missing_extra


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or a DependencyMissingError naming the extra."""
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise missing_extra("figures", "matplotlib", "report") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path) -> Path:
    """Render ``fig`` as PNG and write it with the package's one atomic writer."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    finally:
        fig.clf()
        pyplot().close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return path
