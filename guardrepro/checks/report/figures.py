"""Figure plumbing shared by the report, the guard table and the sweep
outputs: matplotlib on the Agg backend (an error naming the ``report`` extra
when it is missing) and PNG files written with the package's atomic writer.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
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


def label_offsets(points: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]],
                  *, pad: float = 2.0, step: float = 11.0,
                  tries: int = 24) -> list[tuple[float, float]]:
    """Offsets (in points) that keep text labels from overlapping.

    ``points`` are the labelled positions and ``sizes`` each label's (width,
    height), both in points on the page. Labels are placed in order, each at
    the first free slot of (3, 3), (3, 3 - step), (3, 3 + step), (3, 3 - 2
    step), ... (alternating below and above); a slot is free when the label's
    box, grown by ``pad``, meets no box already placed. After ``tries`` slots
    the last one is used (so a label is always placed)."""
    placed: list[tuple[float, float, float, float]] = []
    out = []
    for (x, y), (w, h) in zip(points, sizes, strict=True):
        dy = 3.0
        for k in range(tries):
            dy = 3.0 + (step * (k // 2) if k % 2 == 0 else -step * ((k + 1) // 2))
            box = (x + 3.0 - pad, y + dy - pad, x + 3.0 + w + pad, y + dy + h + pad)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
                       for b in placed):
                break
        placed.append((x + 3.0, y + dy, x + 3.0 + w, y + dy + h))
        out.append((3.0, dy))
    return out


def annotate_apart(ax: Any, labels: Sequence[tuple[str, float, float]], fontsize: float = 7
                   ) -> None:
    """Write each (text, x, y) label next to its point in data coordinates,
    moved up or down (with a leader line) where it would overlap another."""
    if not labels:
        return
    ax.figure.canvas.draw()  # fixes the axes limits, so data -> page points is final
    to_points = ax.transData
    dpi = ax.figure.dpi
    page = [(float(px) * 72.0 / dpi, float(py) * 72.0 / dpi)
            for px, py in (to_points.transform((x, y)) for _, x, y in labels)]
    sizes = [(0.6 * fontsize * len(text), fontsize) for text, _, _ in labels]
    offsets = label_offsets(page, sizes)
    for (text, x, y), (dx, dy) in zip(labels, offsets, strict=True):
        moved = dy != 3.0
        ax.annotate(text, (x, y), fontsize=fontsize, xytext=(dx, dy),
                    textcoords="offset points",
                    arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.6} if moved else None)
