"""guardrepro merge: shard runs merged into one; every refusal on hand-made runs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from recordsets import guard_text
from runner_helpers import write_cohort

from guardrepro.cli import cli
from guardrepro.errors import InputError, ProvenanceError
from guardrepro.run.merge import merge_runs, provenance_differences
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.manifest import RunManifest, read_manifest, write_manifest
from guardrepro.rundir.records import read_records
from guardrepro.rundir.shard import shard_of
from guardrepro.schema import Provenance, Record, Timings

BASE_PROVENANCE: dict[str, Any] = {
    "guard": "toy-guard",
    "backend": "vllm",
    "backend_config": {"dtype": "float32", "device": "cpu", "max_num_seqs": 16},
    "artifact_tree_sha256": "a" * 64,
    "model_revision": "unpinned",
    "template_sha256": "b" * 64,
    "chat_template_sha256": "c" * 64,
    "parser_version": "ts-guard-1",
    "decoding": {"mode": "greedy", "max_new_tokens": 8},
    "package_versions": {"guardrepro": "0.1.0"},
}


def provenance(**changes: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(BASE_PROVENANCE))
    for key, value in changes.items():
        if isinstance(value, dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def record(row: Any, run_id: str, prov: dict[str, Any]) -> dict[str, Any]:
    typed = Provenance.from_dict(prov)
    prov_sha = typed.sha256
    return Record(
        run_id=run_id, row_id=row.row_id, base_sample_id=row.base_sample_id, cohort=row.cohort,
        variant=row.variant, domain=row.domain, gold_label=row.gold_label,
        input_sha256="d" * 64, prompt_tokens=10, provenance_sha256=prov_sha, provenance=typed,
        status="ok", score=row.gold_label, error_type=None, components=None,
        decision_margin=1.5, output_text=guard_text(row.gold_label),
        output_token_ids=[5, 2], finish_reason="stop",
        attempts=(), timings=Timings(prefill_s=0.1, decode_s=0.2, total_s=0.3),
        peak_memory_bytes=None, created_at="2025-01-01T00:00:00Z",
    ).to_dict()


def write_run(
    run_dir: Path,
    cohort: Path,
    rows: list[Any],
    *,
    shard: str | None,
    prov: dict[str, Any] | None = None,
    record_prov: dict[str, Any] | None = None,
) -> Path:
    prov = prov or provenance()
    run_dir.mkdir(parents=True)
    manifest = RunManifest(
        run_id=run_dir.name, created_at="2025-01-01T00:00:00Z",
        provenance=Provenance.from_dict(prov),
        provenance_sha256=Provenance.from_dict(prov).sha256,
        cohort={"path": str(cohort), "sha256": hashlib.sha256(cohort.read_bytes()).hexdigest(),
                "rows": len(read_cohort(cohort))},
        profile={"path": "/somewhere/toy-vllm.toml", "sha256": "e" * 64}, shard=shard,
        rows_selected=len(rows), guardrepro_version="0.1.0", git_commit=None,
    )
    write_manifest(run_dir, manifest)
    lines = [json.dumps(record(r, run_dir.name, record_prov or prov), sort_keys=True)
             for r in rows]
    (run_dir / "records.jsonl").write_text("".join(line + "\n" for line in lines))
    return run_dir


@pytest.fixture()
def cohort(tmp_path: Path) -> Path:
    return write_cohort(tmp_path / "cohort.jsonl", 12)


def shard_runs(tmp_path: Path, cohort: Path, n: int = 3, **kw: Any) -> list[Path]:
    rows = read_cohort(cohort)
    runs = []
    for k in range(1, n + 1):
        mine = [r for r in rows if shard_of(r.row_id, n) == k]
        runs.append(write_run(tmp_path / f"shard{k}", cohort, mine, shard=f"{k}/{n}", **kw))
    return runs


def test_merge_of_all_shards_gives_the_whole_cohort_in_order(tmp_path: Path, cohort: Path) -> None:
    runs = shard_runs(tmp_path, cohort)
    out = tmp_path / "merged"
    report = merge_runs(runs, out)
    records = read_records(out)
    assert [r.row_id for r in records] == [f"row{i:03d}" for i in range(12)]
    # records are the sources' records, unchanged (run_id names the shard run)
    source_ids = {r.row_id: r.run_id for run in runs for r in read_records(run)}
    assert {r.row_id: r.run_id for r in records} == source_ids
    manifest = read_manifest(out)
    assert manifest is not None
    assert manifest.shard is None and manifest.rows_selected == 12 and manifest.run_id == "merged"
    assert manifest.provenance_sha256 == Provenance.from_dict(BASE_PROVENANCE).sha256
    merge_info = json.loads((out / "merge.json").read_text())
    assert [s["shard"] for s in merge_info["sources"]] == ["1/3", "2/3", "3/3"]
    assert sum(s["records"] for s in merge_info["sources"]) == 12
    assert report.merged_rows == report.cohort_rows == 12


def test_mixed_provenance_is_refused_naming_the_keys(tmp_path: Path, cohort: Path) -> None:
    rows = read_cohort(cohort)
    first = write_run(tmp_path / "a", cohort, [r for r in rows if shard_of(r.row_id, 2) == 1],
                      shard="1/2")
    other = provenance(backend_config={"dtype": "bfloat16"}, model_revision="r2")
    second = write_run(tmp_path / "b", cohort, [r for r in rows if shard_of(r.row_id, 2) == 2],
                       shard="2/2", prov=other)
    with pytest.raises(ProvenanceError) as info:
        merge_runs([first, second], tmp_path / "merged")
    message = str(info.value)
    assert "provenance.backend_config.dtype: 'float32' != 'bfloat16'" in message
    assert "provenance.model_revision: 'unpinned' != 'r2'" in message
    assert not (tmp_path / "merged").exists()


def test_a_record_with_other_provenance_than_its_manifest_is_refused(
    tmp_path: Path, cohort: Path
) -> None:
    rows = read_cohort(cohort)
    run = write_run(tmp_path / "a", cohort, rows, shard=None,
                    record_prov=provenance(parser_version="other"))
    with pytest.raises(ProvenanceError, match="line 1"):
        merge_runs([run], tmp_path / "merged")


def test_duplicate_rows_are_refused(tmp_path: Path, cohort: Path) -> None:
    rows = read_cohort(cohort)
    a = write_run(tmp_path / "a", cohort, rows[:8], shard=None)
    b = write_run(tmp_path / "b", cohort, rows[6:], shard=None)
    with pytest.raises(InputError, match=r"more than one run: 'row006'.*'row007'"):
        merge_runs([a, b], tmp_path / "merged")


def test_missing_rows_are_refused_unless_partial(tmp_path: Path, cohort: Path) -> None:
    runs = shard_runs(tmp_path, cohort)
    rows_of_last = [r.row_id for r in read_records(runs[-1])]
    assert rows_of_last, "the cohort must put rows in the last shard"
    with pytest.raises(InputError) as info:
        merge_runs(runs[:-1], tmp_path / "merged")
    message = str(info.value)
    assert f"{len(rows_of_last)} of 12 cohort rows have no record" in message
    assert repr(rows_of_last[0]) in message
    report = merge_runs(runs[:-1], tmp_path / "partial", allow_partial=True)
    assert report.missing == rows_of_last
    assert len(read_records(tmp_path / "partial")) == 12 - len(rows_of_last)


def test_missing_rows_counted_when_the_cohort_file_is_gone(tmp_path: Path, cohort: Path) -> None:
    runs = shard_runs(tmp_path, cohort)
    cohort.unlink()
    with pytest.raises(InputError, match="pass --cohort to list them"):
        merge_runs(runs[:-1], tmp_path / "merged")
    report = merge_runs(runs, tmp_path / "merged")
    assert report.merged_rows == 12 and not report.cohort_checked


def test_different_cohorts_are_refused(tmp_path: Path, cohort: Path) -> None:
    other = write_cohort(tmp_path / "other.jsonl", 12, start=100)
    a = write_run(tmp_path / "a", cohort, read_cohort(cohort)[:6], shard=None)
    b = write_run(tmp_path / "b", other, read_cohort(other)[:6], shard=None)
    with pytest.raises(ProvenanceError, match="different cohorts"):
        merge_runs([a, b], tmp_path / "merged")


def test_a_given_cohort_file_must_be_the_runs_cohort(tmp_path: Path, cohort: Path) -> None:
    runs = shard_runs(tmp_path, cohort)
    other = write_cohort(tmp_path / "other.jsonl", 12, start=100)
    with pytest.raises(ProvenanceError, match="is not the runs' cohort"):
        merge_runs(runs, tmp_path / "merged", cohort_path=other)


def test_record_outside_its_shard_is_refused(tmp_path: Path, cohort: Path) -> None:
    rows = read_cohort(cohort)
    wrong = [r for r in rows if shard_of(r.row_id, 2) == 2][:1]
    run = write_run(tmp_path / "a", cohort, wrong, shard="1/2")
    with pytest.raises(InputError, match="outside the run's shard 1/2"):
        merge_runs([run], tmp_path / "merged", allow_partial=True)


def test_output_must_be_new(tmp_path: Path, cohort: Path) -> None:
    runs = shard_runs(tmp_path, cohort)
    with pytest.raises(InputError, match="one of the runs"):
        merge_runs(runs, runs[0])
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "records.jsonl").write_text("")
    with pytest.raises(InputError, match="not empty"):
        merge_runs(runs, tmp_path / "busy")
    with pytest.raises(InputError, match="given twice"):
        merge_runs([runs[0], runs[0]], tmp_path / "merged")


def test_provenance_differences_lists_leaves() -> None:
    a = {"x": 1, "y": {"z": "p", "w": 2}}
    b = {"x": 1, "y": {"z": "q"}, "v": 3}
    assert provenance_differences(a, b) == [
        "provenance.v: absent != 3",
        "provenance.y.w: 2 != absent",
        "provenance.y.z: 'p' != 'q'",
    ]


def test_merge_cli_exit_codes(tmp_path: Path, cohort: Path) -> None:
    runs = shard_runs(tmp_path, cohort)
    runner = CliRunner()
    ok = runner.invoke(cli, ["merge", *map(str, runs), "--out", str(tmp_path / "m1")])
    assert ok.exit_code == 0, ok.output
    assert ok.output.strip().splitlines()[-1] == str((tmp_path / "m1").resolve())
    assert "merged 3 runs: 12 of 12 cohort rows" in ok.output
    from guardrepro.cli import main

    assert main(["merge", *map(str, runs[:-1]), "--out", str(tmp_path / "m2")]) == 2
    assert not (tmp_path / "m2").exists()


def test_real_shard_runs_merge_into_a_run_that_resumes_as_complete(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from runner_helpers import TEMPLATE, build_diverse_tiny, write_profile

    from guardrepro.run.pipeline import run_cohort

    tiny = build_diverse_tiny(tmp_path / "tiny")
    template = tmp_path / "template.txt"
    template.write_text(TEMPLATE, encoding="utf-8")
    cohort = write_cohort(tmp_path / "cohort.jsonl", 6)
    profile = write_profile(tmp_path / "p.toml", tiny, template, options={"batch_size": 3})
    shards = []
    for k in (1, 2):
        run_cohort(profile, cohort, tmp_path / f"s{k}", shard=f"{k}/2", progress=False)
        shards.append(tmp_path / f"s{k}")
    whole = tmp_path / "whole"
    run_cohort(profile, cohort, whole, progress=False)
    merged = tmp_path / "merged"
    merge_runs(shards, merged)
    volatile = ("run_id", "created_at", "timings", "peak_memory_bytes")

    def stable(run: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.to_dict().items() if k not in volatile}
                for r in read_records(run)]

    assert stable(merged) == stable(whole)
    # the merged manifest is the unsharded run's: `guardrepro run` resumes it, finding it done
    summary = run_cohort(profile, cohort, merged, progress=False)
    assert (summary.already_done, summary.generated, summary.remaining) == (6, 0, 0)
