"""guardrepro.progress off a terminal: the line's wording for rows, bytes and counts."""

from __future__ import annotations

import pytest

from guardrepro.progress import LineProgress, progress_iter


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_rows_every_twentieth_and_one_at_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    with LineProgress(40, "run x", "row", every_s=1e9) as bar:
        for _ in range(41 // 2):  # 20 rows: a line at 2, 4, ..., 20
            bar.update(1)
    lines = _lines(capsys)
    assert len(lines) == 10 and lines[-1] == "run x: 20/40 rows (50%), 0s"


def test_bytes_use_the_prefix_of_the_total(capsys: pytest.CaptureFixture[str]) -> None:
    bar = LineProgress(13_800_000, "verify toy-guard", "B", every_s=1e9, initial=3_100_000)
    bar.update(1)  # below a twentieth: no line yet
    assert _lines(capsys) == []
    bar.close()
    assert _lines(capsys) == ["verify toy-guard: 3.1/13.8 MB (22%), 0s"]
    small = LineProgress(900, "lock a", "B", every_s=1e9)
    small.update(900)
    small.close()  # the line was written by the update: none more
    assert _lines(capsys) == ["lock a: 900/900 B (100%), 0s"]


def test_without_a_total_it_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress_iter(iter("abc"), "intervals", "interval", enabled=True)) == list("abc")
    assert _lines(capsys) == ["intervals: 3 intervals, 0s"]
    assert list(progress_iter("ab", "quiet", "row", enabled=False)) == ["a", "b"]
    assert _lines(capsys) == []
