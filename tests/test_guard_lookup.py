"""Rung 1 (tool-name lookup) and rung 2 on a guard's own predictions over a split.

Eight rows, two per domain (tool, gold), and the guard's scores:

    workspace  A 1 -> 1      B 0 -> 0
    travel     A 1 -> 1      B 0 -> 1
    slack      A 1 -> 0.5    B 0 -> (no record: fails closed, 1)
    banking    C 1 -> 0      B 0 -> 0

Guard decisions 1 0 1 1 1 1 0 0 against gold 1 0 1 0 1 0 1 0.

Gold lookup, leave-one-domain-out: A -> 1 and B -> 0 from any three domains;
banking's C is unseen and gets the training majority (3 of 6 unsafe: a tie,
unsafe), so the lookup is right on all 8 rows. The guard agrees with it on
5/8 rows; its accuracy where the lookup is right is 5/8, where it is wrong
0/0.

Lookup fitted to the guard's decisions, leave-one-domain-out (held out: key
-> prediction): workspace A 1, B 1 (B: t1 s1 b0, 2/3); travel A 1, B 0
(B: w0 s1 b0); slack A 1, B 0 (B: w0 t1 b0); banking C unseen -> majority
5/6 = 1, B 1 (w0 t1 s1). Pooled predictions 1 1 1 0 1 0 1 1 against the
decisions: TP 3, FP 3, FN 2, TN 0 -> F1 6/11, accuracy 3/8. Grouped CV is
checked against scikit-learn's GroupKFold with a lookup written here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from recordsets import grid, write_run
from splitsets import write_split

from guardrepro.cli import main

ROWS = [("workspace", 1, "toola", 1), ("workspace", 2, "toolb", 0),
        ("travel", 1, "toola", 1), ("travel", 2, "toolb", 0),
        ("slack", 1, "toola", 1), ("slack", 2, "toolb", 0),
        ("banking", 1, "toolc", 1), ("banking", 2, "toolb", 0)]
# upstream order is workspace, travel, slack, banking: the rows above already are
SCORES: list[Any] = [1, 0, 1, 1, 0.5, None, 0, 0]
DECISIONS = [1, 0, 1, 1, 1, 1, 0, 0]
GOLD = [1, 0, 1, 0, 1, 0, 1, 0]


def _value(f: dict[str, Any]) -> tuple[int, int]:
    return f["numerator"], f["denominator"]


@pytest.fixture()
def audit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    split = write_split(tmp_path, "agentdojo", ROWS)
    run = write_run(tmp_path / "run", grid(split.bases, {"original": SCORES}), split=True)
    capsys.readouterr()
    assert main(["audit", "tool-lookup", "--data-dir", str(split.root), "--preds", str(run),
                 "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_lodo_on_the_guards_decisions(audit: dict[str, Any]) -> None:
    g = audit["guard"]
    assert (g["rows"], g["valid"], g["missing"]) == (8, 7, 1)
    lodo = g["decision_lookup"]["leave_one_domain_out"]["pooled"]
    assert _value(lodo["f1"]) == (6, 11)
    assert _value(lodo["accuracy"]) == (3, 8)
    vs = g["vs_label_lookup"]["leave_one_domain_out"]
    assert _value(vs["agreement"]) == (5, 8)
    assert _value(vs["guard_accuracy_where_lookup_right"]) == (5, 8)
    assert _value(vs["guard_accuracy_where_lookup_wrong"]) == (0, 0)
    assert g["interpretation"]["name"] == "tool-name predictability of a guard's decisions"
    # the label-only rung is unchanged beside it
    assert audit["interpretation"]["rung"] == 1
    assert _value(audit["leave_one_domain_out"]["pooled"]["accuracy"]) == (8, 8)


def test_guard_scores_match_scikit_learn(audit: dict[str, Any]) -> None:
    sk = pytest.importorskip("sklearn.metrics")
    ms = pytest.importorskip("sklearn.model_selection")
    g = audit["guard"]
    assert g["guard"]["f1"]["value"] == pytest.approx(sk.f1_score(GOLD, DECISIONS))
    assert g["guard"]["accuracy"]["value"] == pytest.approx(sk.accuracy_score(GOLD, DECISIONS))
    banking = g["guard_by_domain"]["banking"]
    assert banking["accuracy"]["value"] == pytest.approx(0.5)
    # grouped CV on the decisions, by an independent lookup over sklearn's folds
    keys = [t for _, _, t, _ in ROWS]
    groups = [f"AgentDojo-Traj:{d}:{i}" for d, i, _, _ in ROWS]
    pooled = [0] * 8
    for train, test in ms.GroupKFold(n_splits=5).split(keys, DECISIONS, groups):
        per: dict[str, list[int]] = {}
        for i in train:
            per.setdefault(keys[i], []).append(DECISIONS[i])
        ys = [DECISIONS[i] for i in train]
        fallback = int(2 * sum(ys) >= len(ys))
        for i in test:
            v = per.get(keys[i])
            pooled[i] = fallback if v is None else int(2 * sum(v) >= len(v))
    cv = g["decision_lookup"]["grouped_cv"]["pooled"]
    assert cv["f1"]["value"] == pytest.approx(sk.f1_score(DECISIONS, pooled))
    assert cv["accuracy"]["value"] == pytest.approx(sk.accuracy_score(DECISIONS, pooled))


def test_association_on_a_whole_split_run(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    # rung 2 takes the same run: the guard's confusion against gold is the
    # one above (fail closed: the missing row blocks and counts as invalid)
    split = write_split(tmp_path, "agentdojo", ROWS)
    run = write_run(tmp_path / "run", grid(split.bases, {"original": SCORES}), split=True)
    capsys.readouterr()
    assert main(["audit", "association", "--data-dir", str(split.root), "--preds", str(run),
                 "--replicates", "200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] == 8
    assert _value(out["guard"]["metrics"]["accuracy"]) == (5, 8)
    assert _value(out["guard"]["coverage"]) == (7, 8)
