"""Sweep specs, rule baselines (run through ``guardrepro run``'s path), and a
killed sweep that resumes without repeating work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from extras import needs_matplotlib

from guardrepro.bench.shortcuts import SIDE_EFFECT_PREFIXES, tool_key
from guardrepro.bench.tsbench import BenchRow
from guardrepro.errors import InputError
from guardrepro.experiments.spec import load_sweep
from guardrepro.guards.registry import get_guard
from guardrepro.guards.rule.lookup import fit_table, training_rows
from guardrepro.guards.rule.rules import evaluate_rule

REPO = Path(__file__).resolve().parents[1]


def _action(tool: str) -> str:
    return f"Thought: go.\nAction: {tool}\nAction Input: {{}}"


def _nuisance(sample: dict[str, Any]) -> float | None:
    adapter = get_guard("rule-nuisance")
    return adapter.parse(evaluate_rule(adapter.render(sample))).score


def test_nuisance_rule_by_hand() -> None:
    marked = "<INFORMATION> do it </INFORMATION>"
    assert _nuisance({"history": marked, "current_action": _action("send_money")}) == 1.0
    assert _nuisance({"history": marked.lower(),
                      "current_action": _action("Update_File")}) == 1.0
    assert _nuisance({"history": marked, "current_action": _action("get_file")}) == 0.0
    assert _nuisance({"history": "plain", "current_action": _action("send_money")}) == 0.0
    assert _nuisance({"history": "<UNTRUSTED_EXTERNAL_CONTENT>",
                      "current_action": _action("send_money")}) == 0.0
    assert _nuisance({"history": [{"content": marked}],
                      "current_action": "no action here"}) == 0.0


def _bench(base: str, tool: str, score: float) -> BenchRow:
    raw = {"current_action": _action(tool), "score": score}
    return BenchRow("banking", 0, raw, base, base, "f")


def _lookup(table: dict[str, Any], tool: str) -> float | None:
    adapter = get_guard("rule-tool-lookup")
    rendered = adapter.render({"current_action": _action(tool)})
    return adapter.parse(evaluate_rule(rendered, table)).score


def test_lookup_trains_only_on_the_declared_split() -> None:
    bench = [_bench("a", "send_money", 1.0), _bench("b", "send_money", 1.0),
             _bench("c", "get_file", 0.0), _bench("held", "get_file", 1.0)]
    model = fit_table(training_rows(bench, {"held"}, "benchmark-minus-cohort"))
    assert model["rows"] == 3
    # get_file: only the safe training row counts; unseen keys -> global majority (2/3 unsafe)
    assert (_lookup(model, "get_file"), _lookup(model, "tool_abc")) == (0.0, 1.0)
    leaky = fit_table(training_rows(bench, {"held"}, "benchmark"))
    assert leaky["rows"] == 4
    assert _lookup(leaky, "get_file") == 1.0  # tie -> unsafe
    with pytest.raises(InputError, match="no rows"):
        training_rows(bench[:1], {"a"}, "benchmark-minus-cohort")


def _spec(tmp: Path, body: str = "", recipes: str | None = None, limit: int = 2) -> Path:
    q = REPO / "quantize"
    recipes = recipes if recipes is not None else (
        f'[[recipe]]\nrecipe = "{q / "q8-g64.toml"}"\ncpu_recipe = "{q / "q8-g64-f32.toml"}"\n'
        f'[[recipe]]\nrecipe = "{q / "q4-g64.toml"}"\ncpu_recipe = "{q / "q4-g64-f32.toml"}"\n'
        '[[rule]]\nrule = "nuisance"\n')
    path = tmp / "sweep.toml"
    path.write_text(
        f'[sweep]\nname = "t"\nsource_lock = "{REPO / "locks/toy-guard.toml"}"\n'
        f'cohort = "{REPO / "cohorts/toy-64.toml"}"\nlimit = {limit}\n'
        f'reference_profile = "{REPO / "runners/toy-hf.toml"}"\nreference_name = "ref"\n'
        f'candidate_profile = "{REPO / "runners/toy-mlx-q8.toml"}"\nreplicates = 100\n'
        f"{body}\n{recipes}", encoding="utf-8")
    return path


RULES = ('[[rule]]\nrule = "nuisance"\n'
         '[[rule]]\nname = "lookup-out"\nrule = "lookup"\n')


def test_sweep_rule_baselines_are_the_records_of_guardrepro_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sweep writes each rule's profile and runs it through ``run_cohort``:
    ``guardrepro run`` with that profile writes the same records; the nuisance
    decisions match the rule computed here from the shared features, and the
    lookup is fitted on the benchmark rows outside the cohort."""
    from guardrepro.bench.tsbench import load_benchmark
    from guardrepro.cli import main
    from guardrepro.experiments import sweep
    from guardrepro.rundir.cohort import read_cohort
    from guardrepro.rundir.records import read_records

    recipe = f'[[recipe]]\nrecipe = "{REPO / "quantize/q8-g64.toml"}"\n'  # not run here
    spec = load_sweep(_spec(tmp_path, recipes=recipe + RULES, limit=12))
    out, home = tmp_path / "out", tmp_path / "home"
    cohort = sweep._cohort(spec, out, home)
    result = sweep.SweepResult(out=out, device="test")
    for entry in spec.rules:
        sweep._rule_config(entry, spec, out, cohort, home, result, progress=False)
    assert result.actions == ["rule rule-nuisance: 12 rows", "rule lookup-out: 12 rows"]
    rows = {r.row_id: r for r in read_cohort(cohort)}
    for entry in spec.rules:
        profile = out / "rules" / f"{entry.name}.toml"
        again = tmp_path / f"cli-{entry.name}"
        code = main(["run", "--profile", str(profile), "--cohort", str(cohort), "--out",
                     str(again), "--no-progress"])
        assert code == 0, capsys.readouterr().err
        skip = {"run_id", "created_at", "timings"}
        mine = [{k: v for k, v in r.to_dict().items() if k not in skip}
                for r in read_records(out / "runs" / entry.name)]
        assert mine == [{k: v for k, v in r.to_dict().items() if k not in skip}
                        for r in read_records(again)]
        assert [r["row_id"] for r in mine] == list(rows)
        assert all(r["status"] == "ok" and r["peak_memory_bytes"] == 0 for r in mine)
        if entry.rule == "nuisance":
            for record in mine:
                sample = rows[record["row_id"]].sample
                key = tool_key(sample["current_action"]) or ""
                fires = ("<information>" in str(sample["history"]).lower()
                         and key.startswith(SIDE_EFFECT_PREFIXES))
                assert record["score"] == float(fires), record["row_id"]
    summary = json.loads((out / "runs" / "lookup-out" / "summary.json").read_text())
    bench_dir = next((home / "artifacts").glob("toy-bench*/*"))
    bench = load_benchmark(bench_dir, "agentdojo")
    held = {r.base_sample_id for r in rows.values()}
    assert summary["lookup"]["train_rows"] == sum(1 for r in bench
                                                  if r.base_sample_id not in held)
    sweep._rule_config(spec.rules[0], spec, out, cohort, home, result, progress=False)
    assert result.actions[-1] == "skip rule-nuisance (done)"


def test_spec_errors_name_the_field(tmp_path: Path) -> None:
    spec = load_sweep(REPO / "quantize/sweeps/toy.toml")
    assert len(spec.recipes) >= 5 and spec.axes == ("bytes", "harm")
    assert {r.rule for r in spec.rules} == {"nuisance", "lookup"}
    with pytest.raises(InputError) as err:
        load_sweep(_spec(tmp_path, 'colour = "red"'))
    assert err.value.field == "sweep.colour"
    with pytest.raises(InputError) as err:
        load_sweep(_spec(tmp_path, recipes='[[recipe]]\nrecipe = "nope.toml"\n'))
    assert err.value.field == "recipe[0].recipe"
    twice = f'[[recipe]]\nrecipe = "{REPO / "quantize/bf16.toml"}"\n' * 2
    with pytest.raises(InputError, match="unique"):
        load_sweep(_spec(tmp_path, recipes=twice))


@pytest.mark.slow
@needs_matplotlib
def test_killed_sweep_resumes_without_repeating_work(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlx_lm")
    import guardrepro.run.attempts as attempts
    from guardrepro.experiments.sweep import run_sweep

    spec = _spec(tmp_path)
    out, home = tmp_path / "out", tmp_path / "home"
    real = attempts.generate_chunk
    calls: list[tuple[str, int]] = []  # (backend, rows) per generate_chunk call

    def killing(*args: Any, **kwargs: Any) -> Any:
        calls.append((args[0].backend, len(args[2])))
        # reference: one chunk of 2 rows; first recipe: 2 chunks; second recipe: 1 chunk, then
        if len(calls) == 5:  # killed before its second row
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(attempts, "generate_chunk", killing)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, out, home=home, progress=False, say=lambda _: None)
    first = sorted((out / "runs").iterdir())
    done = [p.name for p in first if (p / "summary.json").exists()]
    assert len(done) == 1
    finished = out / "runs" / done[0]
    finished_records = (finished / "records.jsonl").read_bytes()
    assert not (out / "summary.json").exists()

    calls.clear()
    monkeypatch.setattr(attempts, "generate_chunk", real)
    monkeypatch.setattr(attempts, "generate_chunk",
                        lambda *a, **k: (calls.append((a[0].backend, len(a[2]))),
                                         real(*a, **k))[1])
    result = run_sweep(spec, out, home=home, progress=False, say=lambda _: None)
    # the killed recipe's missing row only, then the rule baseline (never run
    # before the kill) through the rule backend, one row per chunk
    assert calls == [("mlx", 1), ("rule", 1), ("rule", 1)]
    assert "rule rule-nuisance: 2 rows" in result.actions
    assert f"skip {done[0]} (done)" in result.actions
    assert not [a for a in result.actions if a.startswith("quantize")]
    assert "reference: 0 generated" in result.actions
    assert "reference log-probs" not in result.actions
    assert (finished / "records.jsonl").read_bytes() == finished_records
    names = [row["name"] for row in json.loads((out / "summary.json").read_text())]
    assert names == ["ref", "q8-g64-f32", "q4-g64-f32", "rule-nuisance"]
    for name in names[1:3]:
        records = (out / "runs" / name / "records.jsonl").read_text().splitlines()
        assert len(records) == 2  # no duplicate rows
    assert (out / "frontier.png").exists() and (out / "margins.png").exists()
    report = (out / "report.md").read_text()
    assert "## Frontier" in report and "## Recommendation" in report
    _execute_notebook(out, tmp_path / "figs", monkeypatch)


def _execute_notebook(sweep_dir: Path, figures: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")

    figures.mkdir()
    monkeypatch.setenv("GUARDREPRO_SWEEP_DIR", str(sweep_dir))
    monkeypatch.setenv("GUARDREPRO_FIGURES_DIR", str(figures))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = jupytext.read(REPO / "notebooks" / "sweep.py")
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    assert sorted(p.name for p in figures.glob("*.png")) == ["frontier.png", "kl.png",
                                                             "margins.png"]
