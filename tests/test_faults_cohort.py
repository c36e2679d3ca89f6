"""Fault suite, cohorts: a cohort file with non-UTF-8 bytes or a non-text field.

``guardrepro stats RUN --cohort FILE`` reads the cohort strictly and must exit 2
naming the file, the row and (for a bad field) the field, with no traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from recordsets import grid, write_run

from guardrepro.cli import main

pytestmark = [pytest.mark.faults]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def run_and_cohort(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    bases = [(f"b{i}", "banking", float(i % 2)) for i in range(4)]
    run = write_run(tmp_path / "run", grid(bases, {"original": [0, 1, 0, 1]}))
    rows = [json.loads(x) for x in (tmp_path / "run-cohort.jsonl").read_text().splitlines()]
    return run, rows


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_non_utf8_cohort_names_file_and_line(tmp_path, capsys):
    run, rows = run_and_cohort(tmp_path)
    cohort = write(tmp_path / "bad.jsonl", rows)
    lines = cohort.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"banking"', b'"bank\xe9"')
    cohort.write_bytes(b"\n".join(lines))
    code, _, err = cli(capsys, "stats", str(run), "--cohort", str(cohort), "--replicates", "10")
    assert code == 2 and "Traceback" not in err
    assert str(cohort) in err and "line 3" in err and "UTF-8" in err


EDITS: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("sample.history", lambda s: s.update(history=42)),
    ("sample.instruction", lambda s: s.update(instruction=["a", "list"])),
    ("sample.score", lambda s: s.update(score="high")),
]


@pytest.mark.parametrize(("field", "edit"), EDITS)
def test_non_text_cohort_field_names_file_row_field(tmp_path, capsys, field, edit):
    run, rows = run_and_cohort(tmp_path)
    edit(rows[1]["sample"])
    cohort = write(tmp_path / "bad.jsonl", rows)
    code, _, err = cli(capsys, "stats", str(run), "--cohort", str(cohort), "--replicates", "10")
    assert code == 2 and "Traceback" not in err
    assert str(cohort) in err and "line 2" in err and field in err


def test_interrupted_cohort_build_leaves_no_manifest_without_its_cohort(tmp_path, monkeypatch):
    """A build interrupted between the cohort and the manifest write (the
    interruption injected into the second write) leaves neither: the earlier
    manifest was removed first and the new cohort is removed again, so no
    manifest ever claims a cohort that is not there; a completed build leaves a
    matching pair, and a later edit breaks the pair."""
    import hashlib
    import json
    from types import SimpleNamespace

    from guardrepro.bench.cohort import build as cohort_mod
    from guardrepro.bench.cohort.build import cohort_is_built, manifest_path, write_cohort

    out = tmp_path / "c.jsonl"
    out.write_bytes(b'{"old":1}\n')  # an earlier build's cohort and manifest
    manifest_path(out).write_text('{"sha256": "old", "pinned": true}\n')
    data = b'{"new":1}\n'
    build = SimpleNamespace(data=data, manifest={"sha256": hashlib.sha256(data).hexdigest()})
    real = cohort_mod.atomic_write_bytes
    writes: list[str] = []

    def interrupted(path, payload):
        writes.append(Path(path).name)
        if len(writes) == 2:
            raise KeyboardInterrupt
        return real(path, payload)

    monkeypatch.setattr(cohort_mod, "atomic_write_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_cohort(build, out)
    assert writes == ["c.jsonl", "c.jsonl.manifest.json"]
    assert not out.exists() and not manifest_path(out).exists()
    monkeypatch.setattr(cohort_mod, "atomic_write_bytes", real)
    write_cohort(build, out)
    assert out.read_bytes() == data and cohort_is_built(out)
    assert json.loads(manifest_path(out).read_text())["sha256"] == build.manifest["sha256"]
    out.write_bytes(b'{"edited":1}\n')
    assert not cohort_is_built(out)


TOY_COHORT_BYTES = 305962  # what `cohort build cohorts/toy-64.toml` writes


@pytest.mark.parametrize("leave", [0, 1 << 16, TOY_COHORT_BYTES + 4096, TOY_COHORT_BYTES + 8192])
def test_full_disk_cohort_build_leaves_no_manifest_without_its_cohort(tmp_path, capsys, leave):
    """A real full disk (a 1 MiB tmpfs with ``leave`` bytes free: none, too
    little for the cohort, room for the cohort but not its manifest). Before: the
    manifest, written first, stayed behind claiming ``pinned: true``."""
    from test_faults_env import full_disk

    from guardrepro.bench.cohort.build import cohort_is_built, manifest_path

    root = Path(__file__).resolve().parents[1]
    with full_disk(tmp_path / "full", leave=leave) as disk:
        out = disk / "c.jsonl"
        code, _, err = cli(capsys, "cohort", "build", str(root / "cohorts/toy-64.toml"),
                           "--data-dir", str(root / "guardrepro/data/toy_bench"),
                           "--out", str(out), "--no-progress")
        assert code == 2 and "Traceback" not in err and "disk is full" in err
        assert str(out) in err
        assert not manifest_path(out).exists() and not out.exists()
        assert not cohort_is_built(out)
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no temp file either
