"""Benchmark audits on small sets with worked answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from guardrepro.bench.shortcuts import tool_key
from guardrepro.bench.tsbench import BenchRow, base_sample_id
from guardrepro.checks.audits.benchmark import (
    group_kfold,
    interaction_audit,
    lookup_group,
    tool_lookup_audit,
)
from guardrepro.checks.core.figure import Figure
from guardrepro.cli import main
from guardrepro.errors import InputError


def raw_row(interaction: int, segment: int, tool: str | None, gold: float) -> dict[str, Any]:
    action = "Thought: go\nAction: " + tool + "\nAction Input: {}" if tool else "I just answer."
    return {"id-interaction": interaction, "id-segment": segment,
            "instruction": f"task {interaction}.{segment}", "history": "h", "current_action":
            action, "env_info": "e", "score": gold}


def bench(domain: str, raws: list[dict[str, Any]]) -> list[BenchRow]:
    return [BenchRow(domain, i, r, base_sample_id(r), f"{domain}/{r['id-interaction']}",
                     f"{domain}.json") for i, r in enumerate(raws)]


# Interaction audit: A has 3 rows, B 1, C 2.
#   A: gold 1 1 1, pred 1 0 0;  B: gold 0, pred 1;  C: gold 0 0, pred 0 None
INTER = bench("d", [raw_row(1, 1, "x", 1), raw_row(1, 2, "x", 1), raw_row(1, 3, "x", 1),
                    raw_row(2, 1, "x", 0), raw_row(3, 1, "x", 0), raw_row(3, 2, "x", 0)])
INTER_PREDS: list[float | None] = [1, 0, 0, 1, 0, None]


def test_interaction_audit_by_hand() -> None:
    typed = interaction_audit(INTER, INTER_PREDS)
    assert (typed.rows, typed.interactions) == (6, 3)
    assert typed.row.metrics.f1 == Figure.of(2, 6)
    assert typed.interaction_majority.coverage == Figure.of(2, 3)
    a = typed.to_dict()  # the JSON the audit verb writes
    assert (a["rows"], a["interactions"]) == (6, 3)
    # rows: tp A1; fn A2 A3; fp B1 C2 (None fails closed); tn C1 -> F1 2/6
    row = a["row"]["metrics"]["f1"]
    assert (row["numerator"], row["denominator"]) == (2, 6)
    assert a["row"]["coverage"]["numerator"] == 5
    # weights A 1/3, B 1, C 1/2: tp 1/3, fn 2/3, fp 1 + 1/2, tn 1/2
    # F1 = (2/3) / (2/3 + 3/2 + 2/3) = 4/17
    assert a["equal_interaction"]["metrics"]["f1"]["value"] == pytest.approx(4 / 17)
    assert a["equal_interaction"]["confusion"]["fp"] == pytest.approx(1.5)
    # majority: A gold 1 / decision 0 (1 of 3) -> fn; B fp; C gold 0, decisions
    # 0 and 1 tie -> unsafe -> fp. F1 = 0 / 3
    maj = a["interaction_majority"]
    assert (maj["metrics"]["f1"]["numerator"], maj["metrics"]["f1"]["denominator"]) == (0, 3)
    assert (maj["coverage"]["numerator"], maj["coverage"]["denominator"]) == (2, 3)


# Tool lookup set (domain/interaction: tool, gold):
#   row0 d1/1 send_money 1   row1 d1/1 get_balance 0   row2 d1/2 send_money 1
#   row3 d1/3 Send_Money 0   row4 d2/1 get_balance 0   row5 d2/1 post_message 1
#   row6 d2/2 post_message 0 row7 d2/2 (unparsable) 1  row8 d2/3 (unparsable) 1
TOOLS = bench("d1", [raw_row(1, 1, "send_money", 1), raw_row(1, 2, "get_balance", 0),
                     raw_row(2, 1, "send_money", 1), raw_row(3, 1, "Send_Money ", 0)]) + \
    bench("d2", [raw_row(1, 1, "get_balance", 0), raw_row(1, 2, "post_message", 1),
                 raw_row(2, 1, "post_message", 0), raw_row(2, 2, None, 1),
                 raw_row(3, 1, None, 1)])


def test_tool_key() -> None:
    assert tool_key("Thought: t\nAction:  Send_Money \nAction Input: {}") == "send_money"
    assert tool_key("no markers") == ""  # no Action marker
    # the step parser's name whatever its status: out of order, no input, no arguments
    assert tool_key("Action Input: {}\nAction: Late_Tool") == "late_tool"
    assert tool_key("Action: ONLY_ACTION") == "only_action"
    assert tool_key("Action: T\nAction Input:") == "t"
    # asterisks after the colon stay; casefold, not lower (German sharp s)
    assert tool_key("**Action:** Straße\nAction Input: {}") == "** strasse"
    assert tool_key(None) == ""


def test_lookup_group() -> None:
    assert [lookup_group(r) for r in TOOLS[:2]] == ["AgentDojo-Traj:d1:1"] * 2


def test_group_kfold_worked() -> None:
    # np.unique order d1/1 d1/2 d1/3 d2/1 d2/2 d2/3, sizes 2 1 1 2 2 1. Stable
    # ascending argsort (ties in index order) 1 2 5 0 3 4, reversed: d2/2 d2/1 d1/1 d2/3
    # d1/3 d1/2. Each to the lightest fold (lowest index on ties):
    # d2/2->0 [2,0,0], d2/1->1 [2,2,0], d1/1->2 [2,2,2], d2/3->0 [3,2,2],
    # d1/3->1 [3,3,2], d1/2->2 [3,3,3]
    folds = group_kfold([r.interaction_id for r in TOOLS], 3)
    assert folds == [2, 2, 2, 1, 1, 1, 0, 0, 0]


def test_group_kfold_ties_follow_scikit_learn() -> None:
    # groups a (2 rows), b, c, d (1 row each), 2 folds. Unique a b c d, sizes
    # 2 1 1 1; stable argsort 1 2 3 0, reversed a d c b (equal sizes: last group
    # first). a->0 [2,0]; d->1 [2,1]; c->1 [2,2]; b: tie -> fold 0 [3,2].
    assert group_kfold(["b", "a", "c", "a", "d"], 2) == [0, 0, 1, 0, 1]
    # integer groups 7 3 9 3: unique 3 7 9, sizes 2 1 1; argsort 1 2 0,
    # reversed 3 9 7: 3->0 [2,0]; 9->1 [2,1]; 7->1 [2,2] -> rows 1 0 1 0
    assert group_kfold([7, 3, 9, 3], 2) == [1, 0, 1, 0]
    with pytest.raises(InputError, match="exceeds the 3 groups"):
        group_kfold([7, 3, 9], 4)


def test_group_kfold_equals_scikit_learn_when_installed() -> None:
    sklearn_model_selection = pytest.importorskip("sklearn.model_selection")
    import numpy as np

    rng = np.random.default_rng(260828)
    groups = [f"dom/{g}" for g in rng.integers(0, 150, size=700)]  # many size ties
    expected = [-1] * len(groups)
    splitter = sklearn_model_selection.GroupKFold(n_splits=5)
    for fold, (_, test) in enumerate(splitter.split(np.zeros(len(groups)), groups=groups)):
        for i in test:
            expected[int(i)] = fold
    assert group_kfold(groups, 5) == expected


def test_tool_lookup_cv_and_lodo_worked() -> None:
    typed = tool_lookup_audit(TOOLS, max_splits=3)
    assert typed.grouped_cv.pooled.f1 == Figure.of(4, 9) and typed.grouped_cv.folds == 3
    assert typed.leave_one_domain_out is not None
    assert typed.leave_one_domain_out.per_split["d1"].unseen_key_rows == 3
    assert typed.interpretation.rung == 1
    a = typed.to_dict()  # the JSON the audit verb writes
    assert a["empty_key_rows"] == 2
    assert a["parse_status_counts"] == {"missing_action": 2, "ok_json_object": 7}
    assert a["distinct_keys"] == 4  # send_money, get_balance, post_message, ""
    # fold 2 (rows 0-2) trained on rows 3-8: send_money -> 0, get_balance -> 0
    #   -> preds 0 0 0
    # fold 1 (rows 3-5) trained on 0-2, 6-8: send_money -> 1, get_balance -> 0,
    #   post_message -> 0 -> preds 1 0 0
    # fold 0 (rows 6-8) trained on 0-5: post_message -> 1, None unseen -> global
    #   majority (3 of 6 unsafe: tie -> 1) -> preds 1 1 1
    # pooled preds 0 0 0 1 0 0 1 1 1 vs gold 1 0 1 0 0 1 0 1 1:
    #   tp 2, fp 2, fn 3, tn 2 -> F1 4/9
    cv = a["grouped_cv"]
    f1 = cv["pooled"]["f1"]
    assert (f1["numerator"], f1["denominator"]) == (4, 9)
    assert cv["per_split"]["0"]["unseen_key_rows"] == 2
    assert cv["per_split"]["0"]["global_majority"] == 1
    assert cv["folds"] == 3
    # seen keys: fold 2 rows 0-2 all seen, fold 1 rows 3-5 all seen, fold 0 only
    # row 6 (rows 7, 8 have the empty key, absent from rows 0-5): 7 of 9
    seen = cv["seen_tool_coverage"]
    assert (seen["numerator"], seen["denominator"]) == (7, 9)
    # get_balance is the only key in both domains: rows 1 and 4
    cross = cv["cross_domain_tool_row_coverage"]
    assert (cross["numerator"], cross["denominator"]) == (2, 9)
    # LODO: held-out d1, trained on d2 (get_balance 0, post_message tie -> 1,
    #   None 1, global 3/5 -> 1): send_money unseen -> 1: preds 1 0 1 1
    # held-out d2, trained on d1 (send_money 2/3 -> 1, get_balance 0, global tie
    #   -> 1): preds 0 1 1 1 1
    # pooled tp 5, fp 2, fn 0, tn 2 -> F1 10/12; d1 4/5; d2 6/7
    lodo = a["leave_one_domain_out"]
    f1 = lodo["pooled"]["f1"]
    assert (f1["numerator"], f1["denominator"]) == (10, 12)
    assert lodo["per_split"]["d1"]["f1"]["value"] == pytest.approx(4 / 5)
    assert lodo["per_split"]["d2"]["f1"]["value"] == pytest.approx(6 / 7)
    # send_money is unseen in d2: rows 0, 2 and 3 (Send_Money casefolds to it)
    assert lodo["per_split"]["d1"]["unseen_key_rows"] == 3
    # seen: row 1 (get_balance) when d1 is held out, row 4 when d2 is: 2 of 9
    seen = lodo["seen_tool_coverage"]
    assert (seen["numerator"], seen["denominator"]) == (2, 9)
    assert "no model output is used" in a["interpretation"]["may_not_show"]
    assert a["in_sample"]["f1"]["value"] == pytest.approx(5 / 6)


def test_tool_lookup_folds_capped_by_groups() -> None:
    # 6 interactions: 5 folds by default; 3 interactions: 3 folds
    assert tool_lookup_audit(TOOLS).grouped_cv.folds == 5
    three = bench("d1", [raw_row(1, 1, "a", 1), raw_row(2, 1, "a", 0), raw_row(3, 1, "b", 1)])
    assert tool_lookup_audit(three).to_dict()["grouped_cv"]["folds"] == 3


def write_toolsafe(root: Path, harmful: list[dict[str, Any]], benign: list[dict[str, Any]],
                   preds: list[float | None]) -> Path:
    """A ToolSafe-layout directory holding an AgentHarm benchmark and released
    predictions (upstream order: harmful_steps then benign_steps)."""
    bench_dir = root / "TS-Bench" / "agentharm-traj"
    bench_dir.mkdir(parents=True)
    (bench_dir / "harmful_steps.json").write_text(json.dumps(harmful))
    (bench_dir / "benign_steps.json").write_text(json.dumps(benign))
    logs = root / "guardian_test_logs" / "agentharm" / "TS-Guard"
    logs.mkdir(parents=True)
    rows = harmful + benign
    (logs / "preds.json").write_text(json.dumps(preds))
    (logs / "labels.json").write_text(json.dumps([r["score"] for r in rows]))
    meta = [{"meta_sample": r, "guard_res": {"reason": "x"}} for r in rows]
    (logs / "meta_data.json").write_text(json.dumps(meta))
    return root


def test_audit_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    harmful = [raw_row(1, 1, "x", 1), raw_row(1, 2, "x", 1), raw_row(1, 3, "x", 1)]
    benign = [raw_row(1, 1, "x", 0), raw_row(2, 1, "x", 0), raw_row(2, 2, "x", 0)]
    for r in benign:
        r["instruction"] = "benign " + r["instruction"]  # distinct content, distinct ids
    # same shape as the hand-worked interaction set: harmful/1 = A, benign/1 = B,
    # benign/2 = C
    root = write_toolsafe(tmp_path / "ts", harmful, benign, [1, 0, 0, 1, 0, None])
    out_file = tmp_path / "audit.json"
    assert main(["audit", "interaction", "--json", "--data-dir", str(root),
                 "--benchmark", "agentharm", "--out", str(out_file)]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["equal_interaction"]["metrics"]["f1"]["value"] == pytest.approx(4 / 17)
    assert json.loads(out_file.read_text()) == data
    assert "equal_interaction" in captured.err
    assert main(["audit", "tool-lookup", "--json", "--data-dir", str(root),
                 "--benchmark", "agentharm", "--folds", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    # every row has the tool "x"; harmful -> 1, benign -> 0. LODO: held-out
    # harmful is predicted by benign's majority 0 and vice versa: all wrong.
    assert data["leave_one_domain_out"]["pooled"]["accuracy"]["numerator"] == 0
    assert data["in_sample"]["accuracy"]["value"] == pytest.approx(1 / 2)


def test_audit_interaction_with_run_preds(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from recordsets import write_run

    harmful = [raw_row(1, 1, "x", 1), raw_row(1, 2, "x", 1), raw_row(1, 3, "x", 1)]
    benign = [raw_row(1, 1, "x", 0), raw_row(2, 1, "x", 0), raw_row(2, 2, "x", 0)]
    for r in benign:
        r["instruction"] = "benign " + r["instruction"]
    root = write_toolsafe(tmp_path / "ts", harmful, benign, [0] * 6)
    ids = [base_sample_id(r) for r in harmful + benign]
    domains = ["harmful_steps"] * 3 + ["benign_steps"] * 3
    golds = [1, 1, 1, 0, 0, 0]
    # the run predicts rows 0, 1, 3, 4 (1 0 1 0); rows 2 and 5 have no record:
    # missing -> decision 1, invalid. An edited record is not a benchmark row.
    scores: list[Any] = [1, 0, None, 1, 0, None]
    specs = [(ids[i], "original", domains[i], golds[i], scores[i]) for i in range(6)]
    specs.append((ids[0], "tool_alias", domains[0], golds[0], 0))
    run = write_run(tmp_path / "run", specs)
    assert main(["audit", "interaction", "--json", "--data-dir", str(root),
                 "--benchmark", "agentharm", "--preds", str(run)]) == 0
    data = json.loads(capsys.readouterr().out)
    # decisions 1 0 1 | 1 0 1 vs gold 1 1 1 | 0 0 0: tp 2, fn 1, fp 2, tn 1
    c = data["row"]["confusion"]
    assert (c["tp"], c["fn"], c["fp"], c["tn"]) == (2, 1, 2, 1)
    assert (data["row"]["coverage"]["numerator"], data["row"]["coverage"]["denominator"]) == (4, 6)
