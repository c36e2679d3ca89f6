"""Whole-split cohorts (every TS-Bench row, upstream order, no edits) and the
ASB reader and released-log alignment they rest on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.released_data import (
    agentharm_rows,
    asb_rows,
    flat,
    guard_res_for,
    write_bench,
    write_released,
)

from guardrepro.bench.cohort.build import cohort_is_built
from guardrepro.bench.cohort.split import (
    build_any_cohort_file,
    build_split,
    is_split_spec,
    load_split_spec,
)
from guardrepro.bench.released import load_released, released_dir
from guardrepro.bench.tsbench import base_sample_id, load_benchmark
from guardrepro.errors import InputError
from guardrepro.guards.base import render_ts_guard_prompt
from guardrepro.run.merge import merge_runs
from guardrepro.run.pipeline import run_cohort
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.records import read_records

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "guardrepro" / "data" / "toy_bench"
RULE = ROOT / "runners" / "rule-nuisance.toml"
SPLITS = ("agentdojo", "agentharm", "asb")
UPSTREAM_FILES = {
    "agentdojo": ["workspace", "travel", "slack", "banking"],
    "agentharm": ["harmful_steps", "benign_steps"],
    "asb": ["DPI_attack_success", "OPI_attack_success", "atttack_failure"],
}


def _spec_file(tmp: Path, benchmark: str, lock: str | None = None) -> Path:
    path = tmp / f"{benchmark}-all.toml"
    lock_line = f'data_lock = "{lock or ROOT / "locks/toolsafe.toml"}"'
    path.write_text(f'name = "{benchmark}-all"\nkind = "split"\nbenchmark = "{benchmark}"\n'
                    f"{lock_line}\n")
    return path


def test_asb_reader_upstream_order_and_no_action_rows(tmp_path: Path) -> None:
    files = asb_rows()
    write_bench(tmp_path, files)
    rows = load_benchmark(tmp_path, "asb")
    assert [r.domain for r in rows] == [Path(rel).stem for rel in files for _ in files[rel]]
    assert [r.raw for r in rows] == flat(files)
    # an empty, "None", "Final Answer" or null action is a row like the others
    assert [r.raw["current_action"] for r in rows[-3:]] == ["None", "Final Answer", None]
    assert rows[-1].base_sample_id == base_sample_id({**flat(files)[-1], "current_action": ""})
    assert rows[0].interaction_id == "DPI_attack_success/1"


def test_asb_reader_refuses_a_numeric_action(tmp_path: Path) -> None:
    files = asb_rows()
    files["TS-Bench/asb-traj/test/OPI_attack_success.json"][1]["current_action"] = 7
    write_bench(tmp_path, files)
    with pytest.raises(InputError) as err:
        load_benchmark(tmp_path, "asb")
    assert (err.value.row, err.value.field) == (1, "current_action")
    assert "OPI_attack_success.json" in str(err.value)


def test_asb_released_logs_align_in_upstream_order(tmp_path: Path) -> None:
    files = asb_rows()
    write_bench(tmp_path, files)
    rows = flat(files)
    preds: list[float | None] = [1.0, 0.0, None, 0.0, 0.0, 0.5]
    write_released(tmp_path, "asb/all", rows, preds,
                   [guard_res_for(p, "text") for p in preds])
    assert released_dir("asb") == "guardian_test_logs/asb/all/TS-Guard"
    released = load_released(tmp_path, "asb")
    assert [r.pred for r in released.rows] == preds
    assert [r.domain for r in released.rows] == [
        "DPI_attack_success"] * 2 + ["OPI_attack_success"] * 2 + ["atttack_failure"] * 2
    # files in another order than upstream's: refused, and the message says so
    swapped = rows[2:4] + rows[:2] + rows[4:]
    write_released(tmp_path, "asb/all", swapped, preds,
                   [guard_res_for(p, "text") for p in preds])
    with pytest.raises(InputError, match="ASB DPI_attack_success, OPI_attack_success"):
        load_released(tmp_path, "asb")


def test_split_cohort_keeps_every_row_raw_in_upstream_order(tmp_path: Path) -> None:
    files = agentharm_rows()  # list histories: the prompt must render their repr
    write_bench(tmp_path, files)
    spec = load_split_spec(_spec_file(tmp_path, "agentharm"))
    build = build_split(spec, tmp_path, pinned=False)
    raw = flat(files)
    assert len(build.rows) == len(raw) == build.manifest["rows"]
    assert build.manifest["rows_with_non_string_fields"] == {"history": 3}
    assert [r["variant"] for r in build.rows] == ["original"] * 3
    template = "U={user_request}|A={agent_action}|E={env_info}"
    for row, source in zip(build.rows, raw, strict=True):
        assert row["base_sample_id"] == row["sample"]["sample_id"] == base_sample_id(source)
        action = {"interaction_history": source["history"],
                  "current_action": source["current_action"]}
        upstream = template.format(user_request=source["instruction"], agent_action=action,
                                   env_info=source["env_info"])
        assert render_ts_guard_prompt(template, row["sample"]) == upstream
        assert "[{'role': 'tool'" in upstream
    assert [r["domain"] for r in build.rows] == ["harmful_steps", "harmful_steps",
                                                "benign_steps"]


def test_split_cohort_refuses_unpinned_data_unless_asked(tmp_path: Path) -> None:
    write_bench(tmp_path, asb_rows())
    spec_path = _spec_file(tmp_path, "asb")
    with pytest.raises(Exception, match="does not match data lock"):
        build_split(load_split_spec(spec_path), tmp_path, pinned=True)
    manifest = build_any_cohort_file(spec_path, tmp_path, tmp_path / "c.jsonl", unpinned=True)
    assert manifest["pinned"] is False and manifest["rows"] == 6
    assert cohort_is_built(tmp_path / "c.jsonl")
    assert [r.sample["current_action"] for r in read_cohort(tmp_path / "c.jsonl")][-3:] == [
        "None", "Final Answer", None]


def test_split_spec_errors_name_the_key(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "x"\nkind = "split"\nbenchmark = "webarena"\ndata_lock = "l.toml"\n')
    with pytest.raises(InputError) as err:
        load_split_spec(path)
    assert err.value.field == "benchmark" and str(path) in str(err.value)
    path.write_text('name = "x"\nkind = "split"\nbenchmark = "asb"\ndata_lock = "l"\nrows = 3\n')
    with pytest.raises(InputError, match="rows"):
        load_split_spec(path)


@pytest.mark.parametrize("benchmark", SPLITS)
def test_shipped_split_specs(benchmark: str) -> None:
    real = load_split_spec(ROOT / f"cohorts/{benchmark}-all.toml")
    toy = load_split_spec(ROOT / f"cohorts/toy-{benchmark}-all.toml")
    assert is_split_spec(ROOT / f"cohorts/{benchmark}-all.toml")
    assert not is_split_spec(ROOT / "cohorts/agentdojo-64.toml")
    assert real.domains == toy.domains == tuple(UPSTREAM_FILES[benchmark])
    assert real.data_lock == (ROOT / "locks/toolsafe.toml").resolve()
    assert {"agentdojo": 1220, "agentharm": 731, "asb": None}[benchmark] == real.expected_rows
    # the toy split builds (pinned by the toy-bench lock) to its expected file
    build = build_split(toy, TOY, pinned=True)
    raw = [row for stem in toy.domains
           for row in json.loads((TOY / toy.relpath(stem)).read_text(encoding="utf-8"))]
    assert build.manifest["rows"] == len(raw) == toy.expected_rows
    assert [r["sample"]["instruction"] for r in build.rows] == [r["instruction"] for r in raw]
    assert (build.manifest["sha256_matches"], build.manifest["bytes_match"]) == (True, True), (
        f"toy bench changed: update cohorts/toy-{benchmark}-all.toml to "
        f"{build.manifest['sha256']} / {build.manifest['bytes']}")


def test_toy_asb_has_no_action_rows_and_all_kinds() -> None:
    rows = load_benchmark(TOY, "asb")
    actions = [r.raw["current_action"] for r in rows]
    for value in ("", "None", "Final Answer", None):
        assert value in actions
    assert {r.score for r in rows if r.raw["current_action"] in ("", "None", "Final Answer",
                                                                  None)} == {0.0}
    harm = load_benchmark(TOY, "agentharm")
    assert {r.score for r in harm if r.domain == "harmful_steps"} <= {0.5, 1.0}
    assert {r.score for r in harm if r.domain == "benign_steps"} == {0.0}


def test_split_cohort_runs_resumes_shards_and_merges(tmp_path: Path) -> None:
    cohort = tmp_path / "asb.jsonl"
    build_any_cohort_file(ROOT / "cohorts/toy-asb-all.toml", TOY, cohort)
    ids = [row.row_id for row in read_cohort(cohort)]
    first = run_cohort(RULE, cohort, tmp_path / "full", limit=10, progress=False)
    assert (first.generated, first.remaining) == (10, len(ids) - 10)
    rest = run_cohort(RULE, cohort, tmp_path / "full", progress=False)
    assert (rest.already_done, rest.generated, rest.remaining) == (10, len(ids) - 10, 0)
    full = read_records(tmp_path / "full")
    assert [r.row_id for r in full] == ids  # cohort order, every row, once
    for k in (1, 2):
        run_cohort(RULE, cohort, tmp_path / f"s{k}", shard=f"{k}/2", progress=False)
    merge_runs([tmp_path / "s1", tmp_path / "s2"], tmp_path / "merged")
    merged = read_records(tmp_path / "merged")
    assert [(r.row_id, r.score) for r in merged] == [(r.row_id, r.score) for r in full]
