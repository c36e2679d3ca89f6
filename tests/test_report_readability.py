"""Small readability pieces of the report and the sweep figures."""

from __future__ import annotations

import itertools

from guardrepro.checks.core.formatting import yes_no_unpinned
from guardrepro.checks.report.figures import label_offsets


def test_tree_hash_match_in_words() -> None:
    assert [yes_no_unpinned(v) for v in (True, False, None)] == ["yes", "no", "not pinned"]


def test_labels_on_one_line_do_not_overlap() -> None:
    # eight labels 40 points wide whose points sit 10 points apart on one line
    # (the sweep's configurations that share a harm value)
    points = [(10.0 * i, 100.0) for i in range(8)]
    sizes = [(40.0, 7.0)] * 8
    offsets = label_offsets(points, sizes)
    boxes = [(x + dx, y + dy, x + dx + w, y + dy + h)
             for (x, y), (dx, dy), (w, h) in zip(points, offsets, sizes, strict=True)]
    for a, b in itertools.combinations(boxes, 2):
        assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)
    assert offsets[0] == (3.0, 3.0)  # the first label keeps its usual place


def test_labels_far_apart_stay_put() -> None:
    offsets = label_offsets([(0.0, 0.0), (200.0, 0.0)], [(40.0, 7.0)] * 2)
    assert offsets == [(3.0, 3.0), (3.0, 3.0)]
