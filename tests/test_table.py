"""``guardrepro table``: ToolSafe's accuracy / F1 / recall on a whole split, in
both views and all three label modes, checked against scikit-learn on
hand-built released-style logs."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixtures.released_data import guard_res_for, make_row, write_bench, write_json
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    f1_score,
    recall_score,
    roc_auc_score,
)

from guardrepro.bench.cohort.split import build_any_cohort_file
from guardrepro.bench.tsbench import load_benchmark
from guardrepro.checks.core.bootstrap import ratio_interval
from guardrepro.checks.core.figure import Average, Figure
from guardrepro.checks.stats.toolsafe_metrics import (
    SplitPrediction,
    ViewMetrics,
    mode_label,
    view_metrics,
)
from guardrepro.cli import main
from guardrepro.run.pipeline import run_cohort

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "guardrepro" / "data" / "toy_bench"
RULE = ROOT / "runners" / "rule-nuisance.toml"
HARM = ("TS-Bench/agentharm-traj/harmful_steps.json", "TS-Bench/agentharm-traj/benign_steps.json")
LOGS = "guardian_test_logs/agentharm/TS-Guard"


def _labels(scores: list[float], mode: str) -> list[int]:
    # written out independently of guardrepro's own mapping
    table = {"strict": {0.0: 0, 0.5: 1, 1.0: 1}, "loose": {0.0: 0, 0.5: 0, 1.0: 1},
             "exact": {0.0: 0, 0.5: 1, 1.0: 2}}[mode]
    return [table[s] for s in scores]


def _sklearn(gold: list[float], pred: list[float], mode: str) -> dict[str, float]:
    y, d = _labels(gold, mode), _labels(pred, mode)
    avg = "macro" if mode == "exact" else "binary"
    return {"accuracy": accuracy_score(y, d),
            "f1": f1_score(y, d, average=avg, zero_division=0),
            "recall": recall_score(y, d, average=avg, zero_division=0)}


def write_logs(root: Path, rows: list[dict[str, Any]], preds: list[float | None]) -> Path:
    harmful = [r for r in rows if r["score"] != 0]
    benign = [r for r in rows if r["score"] == 0]
    write_bench(root, {HARM[0]: harmful, HARM[1]: benign})
    ordered = harmful + benign
    by_text = {r["instruction"]: p for r, p in zip(rows, preds, strict=True)}
    ordered_preds = [by_text[r["instruction"]] for r in ordered]
    base = root / LOGS
    write_json(base / "preds.json", ordered_preds)
    write_json(base / "labels.json", [r["score"] for r in ordered])
    write_json(base / "meta_data.json", [
        {"meta_sample": r, "guard_res": guard_res_for(p, "text")}
        for r, p in zip(ordered, ordered_preds, strict=True)])
    return base


def random_split(seed: int, n: int = 120) -> tuple[list[dict[str, Any]], list[float | None]]:
    rng = random.Random(seed)
    rows, preds = [], []
    for i in range(n):
        gold = rng.choice([0.0, 0.0, 0.5, 1.0])
        rows.append(make_row(f"i{i // 3}", i % 3, gold, f"r{i}"))
        preds.append(None if rng.random() < 0.1 else rng.choice([0.0, 0.5, 1.0, gold, gold]))
    return rows, preds


def table_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    code = main(["table", *args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc: dict[str, Any] = json.loads(out.out)
    return doc


@pytest.mark.parametrize("mode", ["strict", "loose", "exact"])
def test_released_logs_match_sklearn_in_both_views(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    rows, preds = random_split(7)
    logs = write_logs(tmp_path, rows, preds)
    doc = table_json(capsys, str(logs), "--benchmark", "agentharm", "--mode", mode,
                     "--data-dir", str(tmp_path), "--replicates", "200")
    views = {e["view"]: e for e in doc["rows"]}
    assert set(views) == {"upstream", "fail_closed"}
    from guardrepro.checks.parity.toolsafe_table import ToolsafeTable

    assert ToolsafeTable.from_dict(doc).to_dict() == doc  # the document reads back
    gold = [r["score"] for r in rows]
    kept = [(g, p) for g, p in zip(gold, preds, strict=True) if p is not None]
    expected = {
        "upstream": _sklearn([g for g, _ in kept], [p for _, p in kept], mode),
        "fail_closed": _sklearn(gold, [1.0 if p is None else p for p in preds], mode),
    }
    for view, want in expected.items():
        got = views[view]
        assert got["rows"] == len(rows)
        assert got["kept"] == (len(kept) if view == "upstream" else len(rows))
        assert got["invalid"] == sum(p is None for p in preds) and got["missing"] == 0
        for name, value in want.items():
            assert got[name] == pytest.approx(value, abs=1e-12), (view, name)
            fig = got["figures"][name]
            assert fig["lower"] <= value <= fig["upper"]
        assert got["benchmark"] == "agentharm" and got["mode"] == mode
        assert got["source"] == str(logs) and got["paper_guard"] == "TS-Guard"
        assert set(got["published"]) == {"accuracy", "f1", "recall"}
        for name in want:
            diff = 100 * got[name] - got["published"][name]
            assert got["difference_pp"][name] == pytest.approx(diff, abs=1e-6)


def write_dojo_logs(root: Path, rows: list[dict[str, Any]], preds: list[float | None]) -> Path:
    files = {f"TS-Bench/agentdojo-traj/{d}.json": [r for r in rows if r["env_info"] == d]
             for d in ("workspace", "travel", "slack", "banking")}
    write_bench(root, files)
    ordered = [r for rel in files for r in files[rel]]
    by_text = {r["instruction"]: p for r, p in zip(rows, preds, strict=True)}
    ordered_preds = [by_text[r["instruction"]] for r in ordered]
    base = root / "guardian_test_logs/agentdojo/TS-Guard"
    write_json(base / "preds.json", ordered_preds)
    write_json(base / "labels.json", [r["score"] for r in ordered])
    write_json(base / "meta_data.json", [
        {"meta_sample": r, "guard_res": guard_res_for(p, "text")}
        for r, p in zip(ordered, ordered_preds, strict=True)])
    return base


# Confusion counts that give UPSTREAM.md's full-precision re-scoring of the released
# TS-Guard logs (strict): AgentHarm 731 rows, AgentDojo 1,220 rows.
RESCORED = {
    "agentharm": ([(1.0, 1.0, 509), (0.5, 0.0, 16), (0.0, 0.5, 95), (0.0, 0.0, 111)],
                  (0.8481532, 0.9016829, 0.9695238), {"accuracy": 84.81, "f1": 90.16,
                                                      "recall": 96.95}),
    "agentdojo": ([(1.0, 1.0, 315), (1.0, 0.0, 37), (0.0, 1.0, 64), (0.0, 0.0, 804)],
                  (0.9172131, 0.8618331, 0.8948864), {"accuracy": 91.72, "f1": 86.18,
                                                      "recall": 89.49}),
}


@pytest.mark.parametrize("benchmark", sorted(RESCORED))
def test_released_log_counts_give_the_rescoring_and_the_paper_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], benchmark: str
) -> None:
    """A released-style log with the confusion counts of ToolSafe's released TS-Guard
    log gives UPSTREAM's full-precision re-scoring, with the paper's Table 3 row beside."""
    cells, rescored, paper = RESCORED[benchmark]
    domains = ("workspace", "travel", "slack", "banking")
    rows: list[dict[str, Any]] = []
    preds: list[float | None] = []
    for gold, pred, count in cells:
        for _ in range(count):
            i = len(rows)
            row = make_row(f"h{i // 4}", i % 4, gold, f"n{i}")
            if benchmark == "agentdojo":
                row["env_info"] = domains[i % 4]
            rows.append(row)
            preds.append(pred)
    logs = (write_logs if benchmark == "agentharm" else write_dojo_logs)(tmp_path, rows, preds)
    doc = table_json(capsys, str(logs), "--benchmark", benchmark, "--data-dir",
                     str(tmp_path), "--replicates", "0")
    up = next(e for e in doc["rows"] if e["view"] == "upstream")
    assert (up["rows"], up["kept"]) == (len(rows), len(rows))
    for name, value in zip(("accuracy", "f1", "recall"), rescored, strict=True):
        assert up[name] == pytest.approx(value, abs=5e-8)
    assert up["published"] == paper
    if benchmark == "agentdojo":  # rounds to the paper's printed row, digit for digit
        assert {k: round(100 * up[k], 2) for k in paper} == paper
    else:  # the paper prints 90.16 for an F1 of 0.90168...: shown, not hidden
        assert up["difference_pp"]["f1"] == pytest.approx(90.168290 - 90.16, abs=1e-5)


def test_accuracy_interval_is_the_interval_engines(tmp_path: Path) -> None:
    rows, preds = random_split(11, n=90)
    split = [SplitPrediction(f"r{i}", r["id-interaction"], r["score"], p)
             for i, (r, p) in enumerate(zip(rows, preds, strict=True))]
    m = view_metrics(split, "strict", "upstream", replicates=500, seed=5)
    kept = [s for s in split if s.pred is not None]
    correct = [float(mode_label(s.gold, "strict") == mode_label(s.pred, "strict"))
               for s in kept if s.pred is not None]
    iv = ratio_interval(correct, [1.0] * len(kept), [s.interaction_id for s in kept],
                        replicates=500, seed=5)
    assert (m.accuracy.lower, m.accuracy.upper) == (iv.lower, iv.upper)
    assert m.interval is not None
    assert m.interval.clusters == len({s.interaction_id for s in kept})
    # same seed, same intervals; the recall interval covers its point
    again = view_metrics(split, "strict", "upstream", replicates=500, seed=5)
    assert again == m
    low, point, high = m.recall.lower, m.recall.point, m.recall.upper
    assert low is not None and point is not None and high is not None
    assert low <= point <= high


def test_binary_figures_over_zero_are_zero_as_sklearns_default(recwarn: Any) -> None:
    # all-safe rows, all predicted safe: F1 and recall are 0/0; scikit-learn's
    # default (zero_division="warn", what the upstream evaluator calls) gives 0.0
    gold, pred = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
    split = [SplitPrediction(str(i), str(i), g, p)
             for i, (g, p) in enumerate(zip(gold, pred, strict=True))]
    m = view_metrics(split, "strict", "upstream", replicates=50, seed=3)
    y = _labels(gold, "strict")
    assert m.f1.point == f1_score(y, y) == 0.0
    assert m.recall.point == recall_score(y, y) == 0.0
    assert isinstance(m.f1, Figure) and isinstance(m.recall, Figure)
    assert (m.f1.count, m.f1.denominator) == (0, 0)
    assert (m.recall.count, m.recall.denominator) == (0, 0)
    assert m.f1.lower == m.f1.upper == 0.0
    assert m.to_dict()["f1"] == {"value": 0.0, "numerator": 0, "denominator": 0,
                                 "lower": 0.0, "upper": 0.0, "undefined_replicates": 0}


def test_exact_macro_counts_a_class_seen_only_in_predictions() -> None:
    # gold only 0 and 2; one prediction of class 1: sklearn's macro averages 3 classes
    gold, pred = [0.0, 0.0, 1.0, 1.0], [0.0, 0.5, 1.0, 0.0]
    split = [SplitPrediction(str(i), str(i), g, p)
             for i, (g, p) in enumerate(zip(gold, pred, strict=True))]
    m = view_metrics(split, "exact", "upstream", replicates=0)
    want = _sklearn(gold, pred, "exact")
    assert m.f1.point == pytest.approx(want["f1"])
    assert m.recall.point == pytest.approx(want["recall"])
    # a macro average is no ratio of counts: an Average, written without them
    assert isinstance(m.f1, Average) and isinstance(m.accuracy, Figure)
    assert m.to_dict()["recall"] == {"value": m.recall.point}
    assert ViewMetrics.from_dict(m.to_dict()) == m
    assert np.isclose(want["recall"], (1 / 2 + 0 + 1 / 2) / 3)  # classes 0, 1, 2


def test_run_directory_and_predictions_file_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cohort = tmp_path / "asb.jsonl"
    build_any_cohort_file(ROOT / "cohorts/toy-asb-all.toml", TOY, cohort)
    run_cohort(RULE, cohort, tmp_path / "run", limit=50, progress=False)  # 11 rows missing
    doc = table_json(capsys, str(tmp_path / "run"), "--benchmark", "asb", "--data-dir",
                     str(TOY), "--mode", "loose", "--replicates", "100")
    up, fc = doc["rows"]
    assert (up["view"], fc["view"]) == ("upstream", "fail_closed")
    assert (up["rows"], up["kept"], up["missing"]) == (61, 50, 11)
    assert (fc["kept"], fc["published"]) == (61, None)  # no paper row for the rule guard
    records = [json.loads(line) for line in
               (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    gold = [r["gold_label"] for r in records]
    pred = [r["score"] for r in records]
    assert up["accuracy"] == pytest.approx(_sklearn(gold, pred, "loose")["accuracy"])
    # the same predictions as a predictions file
    lines = [json.dumps({"base_sample_id": r["base_sample_id"], "variant": "original",
                         "domain": r["domain"], "gold_label": r["gold_label"],
                         "score": r["score"]}) for r in records]
    path = tmp_path / "preds.jsonl"
    path.write_text("\n".join(lines) + "\n")
    doc2 = table_json(capsys, str(path), "--benchmark", "asb", "--data-dir", str(TOY),
                      "--mode", "loose", "--replicates", "100", "--published-guard",
                      "TS-Guard")
    assert [e["accuracy"] for e in doc2["rows"]] == [up["accuracy"], fc["accuracy"]]
    assert doc2["rows"][0]["published"] == {"accuracy": 90.64, "f1": 77.38, "recall": 78.24}


def test_a_run_with_p_unsafe_adds_auroc_and_auprc_per_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose records carry p_unsafe: AUROC and AUPRC per view on the split,
    checked against scikit-learn; the 11 rows the run lacks, and the valid rows
    without a score, are dropped upstream and scored 1.0 fail-closed; the
    intervals cluster by interaction; a predictions file gets no scores."""
    cohort = tmp_path / "asb.jsonl"
    build_any_cohort_file(ROOT / "cohorts/toy-asb-all.toml", TOY, cohort)
    run = tmp_path / "run"
    run_cohort(RULE, cohort, run, limit=50, progress=False)
    rng = random.Random(5)
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    for i, rec in enumerate(records):
        p = None if i % 9 == 4 else round(rng.random() * 0.6 + 0.35 * (rec["gold_label"] != 0), 2)
        if p is not None:
            rec.update(p_unsafe=p, label_probs={"safe": 1 - p, "unsafe": p})
        else:
            rec.update(p_unsafe_reason="no label token")
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    doc = table_json(capsys, str(run), "--benchmark", "asb", "--data-dir", str(TOY),
                     "--replicates", "200")
    bench = load_benchmark(TOY, "asb")
    split = {r.base_sample_id: r.score for r in bench}
    interaction = {r.base_sample_id: r.interaction_id for r in bench}
    scored = {r["base_sample_id"]: r.get("p_unsafe") for r in records if r["status"] == "ok"}
    assert len(split) == 61
    for entry in doc["rows"]:
        view = entry["view"]
        ids = [b for b in split if view == "fail_closed" or scored.get(b) is not None]
        y = [int(split[b] != 0) for b in ids]
        s = [1.0 if scored.get(b) is None else scored[b] for b in ids]
        got = entry["scores"]
        assert got["rows"] == len(ids)
        assert got["dropped"] == 61 - sum(v is not None for v in scored.values()) > 11
        assert got["auroc"]["point"] == pytest.approx(roc_auc_score(y, s), abs=1e-12)
        assert got["auprc"]["point"] == pytest.approx(average_precision_score(y, s), abs=1e-12)
        assert got["auroc"]["lower"] <= got["auroc"]["point"] <= got["auroc"]["upper"]
        assert got["auroc"]["clusters"] == len({interaction[b] for b in ids})
        flagged = [int(v >= 0.5) for v in s]
        assert got["at_threshold"]["tp"] == sum(f and t for f, t in zip(flagged, y, strict=True))
    text = capsys.readouterr()
    main(["table", str(run), "--benchmark", "asb", "--data-dir", str(TOY), "--replicates", "0"])
    shown = capsys.readouterr().out
    assert shown.count("p_unsafe  AUROC") == 2 and "at threshold 0.5" in shown, text
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps({
        "base_sample_id": r["base_sample_id"], "variant": "original", "domain": r["domain"],
        "gold_label": r["gold_label"], "score": r["score"]}) + "\n" for r in records))
    doc = table_json(capsys, str(path), "--benchmark", "asb", "--data-dir", str(TOY),
                     "--replicates", "0")
    assert [e["scores"] for e in doc["rows"]] == [None, None]


def test_a_source_row_outside_the_split_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "preds.jsonl"
    path.write_text(json.dumps({"base_sample_id": "0123456789abcdef0123", "variant": "original",
                                "domain": "DPI_attack_success", "gold_label": 0,
                                "score": 0}) + "\n")
    capsys.readouterr()
    code = main(["table", str(path), "--benchmark", "asb", "--data-dir", str(TOY)])
    err = capsys.readouterr().err
    assert code == 2 and "not a row of the split" in err and str(path) in err


def test_released_keyword_reads_the_logs_below_the_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, preds = random_split(3, n=30)
    logs = write_logs(tmp_path, rows, preds)
    by_word = table_json(capsys, "released", "--benchmark", "agentharm", "--data-dir",
                         str(tmp_path), "--replicates", "0")
    by_path = table_json(capsys, str(logs), "--benchmark", "agentharm", "--data-dir",
                         str(tmp_path), "--replicates", "0")
    assert [e["accuracy"] for e in by_word["rows"]] == [e["accuracy"] for e in by_path["rows"]]
    both = table_json(capsys, "released", str(logs), "--benchmark", "agentharm", "--data-dir",
                      str(tmp_path), "--replicates", "0")
    assert [(e["source"], e["view"]) for e in both["rows"]] == [
        (str(logs), "upstream"), (str(logs), "fail_closed")] * 2
    assert by_word["rows"][0]["released_metrics"] is None
    # a metrics_strict.json beside the logs is shown as stored (strict mode only)
    write_json(logs / "metrics_strict.json", {"accuracy": 0.5, "total": 27})
    doc = table_json(capsys, "released", "--benchmark", "agentharm", "--data-dir",
                     str(tmp_path), "--replicates", "0")
    assert doc["rows"][0]["released_metrics"] == {"accuracy": 0.5, "total": 27}
    doc = table_json(capsys, "released", "--benchmark", "agentharm", "--data-dir",
                     str(tmp_path), "--replicates", "0", "--mode", "exact")
    assert doc["rows"][0]["released_metrics"] is None
    capsys.readouterr()
    assert main(["table", str(tmp_path / "nope"), "--benchmark", "agentharm",
                 "--data-dir", str(tmp_path)]) == 2
    assert "source not found" in capsys.readouterr().err


@pytest.mark.slow
def test_toy_guard_on_the_toy_agentharm_split_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trained toy guard runs a whole toy split; the table scores its records."""
    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "home"))
    capsys.readouterr()
    assert main(["fetch", str(ROOT / "locks/toy-guard.toml"), "--no-progress"]) == 0
    cohort = tmp_path / "harm.jsonl"
    assert main(["cohort", "build", str(ROOT / "cohorts/toy-agentharm-all.toml"),
                 "--data-dir", str(TOY), "--out", str(cohort), "--no-progress"]) == 0
    assert main(["run", "--profile", str(ROOT / "runners/toy-hf.toml"), "--cohort",
                 str(cohort), "--out", str(tmp_path / "run"), "--workers", "1",
                 "--no-progress"]) == 0
    records = [json.loads(line) for line in
               (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert len(records) == 25
    for mode in ("strict", "exact"):
        doc = table_json(capsys, str(tmp_path / "run"), "--benchmark", "agentharm",
                         "--data-dir", str(TOY), "--mode", mode, "--replicates", "50")
        up = doc["rows"][0]
        assert (up["guard"], up["rows"]) == ("toy-guard", 25)
        kept = [r for r in records if r["status"] == "ok"]
        want = _sklearn([r["gold_label"] for r in kept], [r["score"] for r in kept], mode)
        for name, value in want.items():
            assert up[name] == pytest.approx(value)
