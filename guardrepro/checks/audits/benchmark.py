"""Audits of the benchmark itself (no model): interaction weighting and the
tool-name lookup shortcut.

Input: TS-Bench rows (``guardrepro.bench.tsbench.BenchRow``, upstream order) and,
for the interaction audit, one prediction per row (0 / 0.5 / 1 or None): the
released ones (``released_preds``) or a run's, from a run already read
(``run_preds``: a ``rundir.read.RunData`` or ``RecordsFile``, nothing read again).

Output: typed results (``checks.audits.types``: ``InteractionAudit``,
``ToolLookupAudit``; ``to_dict()`` is the JSON the audit verbs write, every
figure with numerator and denominator) and plain-text tables.

Interaction audit (``interaction_audit``): the strict confusion and metrics
(fail-closed: a None prediction is decision 1 and invalid) three ways:

- ``row``: every row weighs 1;
- ``equal_interaction``: each row weighs 1 / (rows of its interaction), so
  each interaction weighs 1 in total;
- ``interaction_majority``: one unit per interaction; its gold label is the
  majority of its rows' strict gold labels and its decision the majority of
  its rows' strict (fail-closed) decisions, ties unsafe in both.

The interaction is ``BenchRow.interaction_id`` = ``"<domain>/<id-interaction>"``
(upstream numbers interactions per file).

Tool-name lookup (``tool_lookup_audit``), rung 1 of the audit ladder
(``docs/PROTOCOL.md``, "Tool-name lookup"): label predictability from a
nuisance feature, with no model involved. The key of a row is the step
parser's tool name (``guardrepro.bench.react.parse_step`` on the stringified
``current_action``, whatever the parse status; ``""`` without an Action
marker), stripped and casefolded (``tool_key``). Fitting on training rows:
per key the mean strict gold label, >= 0.5 -> unsafe (ties unsafe);
prediction for a test row: its key's label, or for a key never seen in
training the training set's global majority (mean >= 0.5 -> unsafe).
Evaluation, predictions pooled over the held-out parts and scored once:

- grouped K-fold (``group_kfold``), n_splits = min(5, groups), groups
  ``"AgentDojo-Traj:<domain>:<id-interaction>"`` (``lookup_group``);
- leave-one-domain-out, domains in sorted order.

Both report ``seen_tool_coverage`` (held-out rows whose key was seen in
training, over all rows: the fold-size weighted mean of per-fold coverage)
and ``cross_domain_tool_row_coverage`` (rows whose key also occurs in
another domain). Per-split figures are reported beside the pooled ones. ``group_kfold`` mirrors
scikit-learn's ``GroupKFold`` without shuffling, tie behaviour included
(checked against scikit-learn 1.9.1's source and output): groups are the
sorted ``np.unique`` values with their row counts; they are visited in the
order ``np.argsort(counts, kind="stable")[::-1]`` -- largest first, and among
equally large groups the one later in sorted order first -- and each goes to
``np.argmin`` of the current fold row counts (the lowest fold index among
equally light folds). A row's fold is its group's. scikit-learn releases
before its stable-sort fix (pull request 28464) sorted with NumPy's default,
unstable kind, whose order of equal counts can depend on the NumPy build and
CPU; this function follows the current, platform-independent behaviour.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from guardrepro.bench.react import parse_step_at
from guardrepro.bench.released import ReleasedSet
from guardrepro.bench.shortcuts import fit_lookup, majority, predict_lookup
from guardrepro.bench.tsbench import BenchRow, field_text
from guardrepro.checks.audits.ladder import interpretation
from guardrepro.checks.audits.types import (
    GuardLookup,
    InteractionAudit,
    LookupScore,
    MajoritySummary,
    SplitEvaluation,
    SplitScore,
    ToolLookupAudit,
)
from guardrepro.checks.core.figure import Figure, plain
from guardrepro.checks.core.metrics import (
    confusion,
    interaction_weights,
    strict_decision,
)
from guardrepro.errors import InputError
from guardrepro.rundir.read import ORIGINAL, RecordsFile, RunData
from guardrepro.schema import Record


def interaction_audit(rows: Sequence[BenchRow], preds: Sequence[float | None],
                      ) -> InteractionAudit:
    """Row, equal-interaction and interaction-majority strict metrics."""
    if len(rows) != len(preds):
        raise InputError(f"{len(rows)} rows but {len(preds)} predictions", field="preds")
    if not rows:
        raise InputError("no rows")
    gold = [r.score for r in rows]
    keys = [r.interaction_id for r in rows]
    row_c = confusion(gold, preds)
    eq_c = confusion(gold, preds, interaction_weights(keys))
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    g_major = [float(majority([strict_decision(gold[i]) for i in idx])) for idx in groups.values()]
    p_major = [float(majority([strict_decision(preds[i]) for i in idx]))
               for idx in groups.values()]
    maj = confusion(g_major, p_major).summary()
    complete = sum(1 for idx in groups.values() if all(preds[i] is not None for i in idx))
    return InteractionAudit(
        rows=len(rows),
        interactions=len(groups),
        row=row_c.summary(),
        equal_interaction=eq_c.summary(),
        interaction_majority=MajoritySummary(maj.cells, maj.rows, Figure.of(complete, len(groups)),
                                             maj.metrics),
        definitions={
            "interaction": "domain/id-interaction",
            "equal_interaction": "row weight 1/(rows in its interaction)",
            "interaction_majority": "majority strict gold vs majority strict decision per "
                                    "interaction, ties unsafe; decisions fail closed",
        },
    )


def preds_from_records(rows: Sequence[BenchRow], records: Sequence[Record],
                       file: str | None = None) -> list[float | None]:
    """One prediction per benchmark row from a run's ``original`` records,
    matched by base_sample_id; a row without a record is None (missing, fails
    closed). Records of edited variants are not benchmark rows and are not
    used; an original record matching no benchmark row is an error."""
    index = {r.base_sample_id: i for i, r in enumerate(rows)}
    preds: list[float | None] = [None] * len(rows)
    for n, rec in enumerate(records):
        if rec.variant != "original":
            continue
        i = index.get(rec.base_sample_id)
        if i is None:
            raise InputError(f"record {rec.row_id!r} matches no benchmark row", file=file,
                             row=n, field="base_sample_id")
        if float(rec.gold_label) != rows[i].score:
            raise InputError(f"record {rec.row_id!r} has gold {rec.gold_label}, the benchmark "
                             f"row has {rows[i].score}", file=file, row=n, field="gold_label")
        preds[i] = rec.score
    return preds


def run_preds(rows: Sequence[BenchRow], run: RunData | RecordsFile
              ) -> tuple[list[float | None], set[str]]:
    """``preds_from_records`` of a run already read (nothing is read again), and
    the base ids holding an original record."""
    if isinstance(run, RunData):
        records, file = run.records, run.records_file
    else:
        records, file = run.records, run.path
    recorded = {r.base_sample_id for r in records if r.variant == ORIGINAL}
    return preds_from_records(rows, records, file=str(file)), recorded


def released_preds(rows: Sequence[BenchRow], released: ReleasedSet) -> list[float | None]:
    """Released predictions aligned to ``rows`` by sample id (every row must
    have one)."""
    out: list[float | None] = []
    for r in rows:
        rel = released.by_base_sample_id.get(r.base_sample_id)
        if rel is None:
            raise InputError(f"no released prediction for row {r.base_sample_id}",
                             file=r.file, row=r.index)
        out.append(rel.pred)
    return out


def lookup_group(row: BenchRow) -> str:
    """The grouped-CV group of a row: ``AgentDojo-Traj:<domain>:<id-interaction>``."""
    return f"AgentDojo-Traj:{row.domain}:{row.raw['id-interaction']}"


def group_kfold(groups: Sequence[Hashable], n_splits: int = 5) -> list[int]:
    """Fold index of every row, exactly as scikit-learn's ``GroupKFold``
    (no shuffle) assigns them: all rows of a group share a fold; groups by
    row count descending (stable argsort reversed: among equal counts the
    later group first), each to the lightest fold (lowest index on ties).
    See the module docstring."""
    if n_splits < 2:
        raise InputError("n_splits must be >= 2", field="n_splits")
    if not groups:
        raise InputError("no groups", field="groups")
    unique_groups, groups_inv = np.unique(np.asarray(list(groups)), return_inverse=True)
    if n_splits > len(unique_groups):
        raise InputError(f"n_splits={n_splits} exceeds the {len(unique_groups)} groups",
                         field="n_splits")
    n_per_group = np.bincount(groups_inv.reshape(-1))
    indices = np.argsort(n_per_group, kind="stable")[::-1]
    n_per_fold = np.zeros(n_splits, dtype=np.int64)
    group_to_fold = np.zeros(len(unique_groups), dtype=np.int64)
    for group_index in indices:
        lightest = int(np.argmin(n_per_fold))
        n_per_fold[lightest] += n_per_group[group_index]
        group_to_fold[group_index] = lightest
    return [int(f) for f in group_to_fold[groups_inv.reshape(-1)]]


def _score(gold: Sequence[int], pred: Sequence[int]) -> LookupScore:
    c = confusion([float(g) for g in gold], [float(p) for p in pred])
    return LookupScore(c.rows, c.f1(), c.accuracy(), c.summary().cells)


def held_out_predictions(keys: Sequence[str], labels: Sequence[int],
                         split: Sequence[Hashable]) -> list[int]:
    """The lookup's prediction for every row, fitted on the rows of the other
    split values (each split value held out in turn, sorted)."""
    pooled = [0] * len(keys)
    for value in sorted(set(split), key=str):
        train = [i for i, s in enumerate(split) if s != value]
        test = [i for i, s in enumerate(split) if s == value]
        table, fallback = fit_lookup([keys[i] for i in train], [labels[i] for i in train])
        for i, p in zip(test, predict_lookup(table, fallback, [keys[i] for i in test]),
                        strict=True):
            pooled[i] = p
    return pooled


def _evaluate_split(keys: Sequence[str], labels: Sequence[int], split: Sequence[Hashable],
                    cross_domain: Sequence[bool], folds: int | None = None) -> SplitEvaluation:
    """Hold out each split value in turn (sorted); pooled and per-split scores."""
    pooled = held_out_predictions(keys, labels, split)
    seen = 0
    per: dict[str, SplitScore] = {}
    for value in sorted(set(split), key=str):
        train = [i for i, s in enumerate(split) if s != value]
        test = [i for i, s in enumerate(split) if s == value]
        table, fallback = fit_lookup([keys[i] for i in train], [labels[i] for i in train])
        pred = [pooled[i] for i in test]
        score = _score([labels[i] for i in test], pred)
        unseen = sum(1 for i in test if keys[i] not in table)
        seen += len(test) - unseen
        per[str(value)] = SplitScore(score.rows, score.f1, score.accuracy, score.cells,
                                     train_rows=len(train), unseen_key_rows=unseen,
                                     global_majority=fallback)
    f1s = [v for v in (b.f1.point for b in per.values()) if v is not None]
    return SplitEvaluation(
        pooled=_score(labels, pooled),
        seen_tool_coverage=Figure.of(seen, len(keys)),
        cross_domain_tool_row_coverage=Figure.of(sum(cross_domain), len(keys)),
        per_split=per,
        mean_f1_over_splits=sum(f1s) / len(f1s) if f1s else None,
        splits_with_defined_f1=len(f1s),
        folds=folds,
    )


def _lookup_inputs(rows: Sequence[BenchRow], max_splits: int,
                   ) -> tuple[list[Any], list[str], list[str], list[int], int, list[bool]]:
    """(steps, tool keys, CV groups, folds, n_splits, key-occurs-in-another-domain)."""
    if not rows:
        raise InputError("no rows")
    steps = [parse_step_at(field_text(r.raw["current_action"]), file=r.file, row=r.index)
             for r in rows]
    keys = [step.tool_name.strip().casefold() for step in steps]
    groups = [lookup_group(r) for r in rows]
    n_splits = min(max_splits, len(set(groups)))
    folds = group_kfold(groups, n_splits)
    key_domains: dict[str, set[str]] = {}
    for k, r in zip(keys, rows, strict=True):
        key_domains.setdefault(k, set()).add(r.domain)
    cross = [len(key_domains[k] - {r.domain}) > 0 for k, r in zip(keys, rows, strict=True)]
    return steps, keys, groups, folds, n_splits, cross


def tool_lookup_audit(rows: Sequence[BenchRow], max_splits: int = 5) -> ToolLookupAudit:
    """The tool-name lookup diagnostic (rung 1): grouped K-fold with
    n_splits = min(max_splits, groups), and leave-one-domain-out."""
    steps, keys, groups, folds, n_splits, cross = _lookup_inputs(rows, max_splits)
    labels = [strict_decision(r.score) for r in rows]
    domains = [r.domain for r in rows]
    table, fallback = fit_lookup(keys, labels)
    cv = _evaluate_split(keys, labels, folds, cross, n_splits)
    lodo = _evaluate_split(keys, labels, domains, cross) if len(set(domains)) > 1 else None
    statuses: dict[str, int] = {}
    for step in steps:
        statuses[step.status] = statuses.get(step.status, 0) + 1
    return ToolLookupAudit(
        rows=len(rows),
        interactions=len(set(groups)),
        distinct_keys=len(set(keys)),
        empty_key_rows=sum(1 for k in keys if not k),
        parse_status_counts=dict(sorted(statuses.items())),
        in_sample=_score(labels, predict_lookup(table, fallback, keys)),
        grouped_cv=cv,
        leave_one_domain_out=lodo,
        interpretation=interpretation(1),
        definitions={
            "key": "step parser tool name of the stringified current_action, whatever "
                   "the status, stripped and casefolded; '' without an Action marker",
            "fit": "per key mean strict gold label >= 0.5 -> unsafe (ties unsafe)",
            "unseen": "training global majority strict label, ties unsafe",
            "group": "AgentDojo-Traj:<domain>:<id-interaction>",
            "group_kfold": "scikit-learn GroupKFold without shuffle, n_splits = min(5, "
                           "groups): groups in np.argsort(size, kind='stable')[::-1] "
                           "order, each to np.argmin(fold sizes)",
            "score": "strict F1 of held-out predictions pooled over all rows",
            "seen_tool_coverage": "held-out rows whose key was seen in training / rows",
            "cross_domain_tool_row_coverage": "rows whose key occurs in another domain / "
                                              "rows",
        },
    )


def guard_lookup(rows: Sequence[BenchRow], preds: Sequence[float | None], *, source: str,
                 missing: int = 0, max_splits: int = 5) -> GuardLookup:
    """Rung 1 on a guard's predictions, one per row (None: missing or invalid,
    fails closed as decision 1). ``source`` names where they came from,
    ``missing`` how many of the None rows had no prediction at all."""
    if len(rows) != len(preds):
        raise InputError(f"{len(rows)} rows but {len(preds)} predictions", field="preds")
    _, keys, _, folds, n_splits, cross = _lookup_inputs(rows, max_splits)
    gold = [strict_decision(r.score) for r in rows]
    decisions = [strict_decision(p) for p in preds]
    domains = [r.domain for r in rows]
    splits: dict[str, tuple[Sequence[Hashable], int | None]] = {"grouped_cv": (folds, n_splits)}
    if len(set(domains)) > 1:
        splits["leave_one_domain_out"] = (domains, None)
    decision_lookup, versus = {}, {}
    for name, (split, n) in splits.items():
        decision_lookup[name] = _evaluate_split(keys, decisions, split, cross, n)
        looked = held_out_predictions(keys, gold, split)
        right = [i for i, (p, y) in enumerate(zip(looked, gold, strict=True)) if p == y]
        wrong = [i for i in range(len(rows)) if looked[i] != gold[i]]
        versus[name] = {
            "agreement": Figure.of(sum(d == p for d, p in zip(decisions, looked, strict=True)),
                               len(rows)),
            "guard_accuracy_where_lookup_right": Figure.of(
                sum(decisions[i] == gold[i] for i in right), len(right)),
            "guard_accuracy_where_lookup_wrong": Figure.of(
                sum(decisions[i] == gold[i] for i in wrong), len(wrong)),
        }
    by_domain = {d: _score([gold[i] for i, x in enumerate(domains) if x == d],
                           [decisions[i] for i, x in enumerate(domains) if x == d])
                 for d in sorted(set(domains))}
    return GuardLookup(
        source=source, rows=len(rows), valid=sum(p is not None for p in preds),
        missing=missing, guard=_score(gold, decisions), guard_by_domain=by_domain,
        decision_lookup=decision_lookup, vs_label_lookup=versus,
        interpretation=interpretation(1, guard=True))


def _f(r: Figure | None) -> str:
    if r is None:
        return "-"
    v = r.point
    return f"{plain(r.count):.6g}/{plain(r.denominator):.6g}" + ("" if v is None else f" = {v:.4f}")


def format_interaction(audit: InteractionAudit) -> str:
    lines = [f"rows {audit.rows}, interactions {audit.interactions}, "
             f"coverage {_f(audit.row.coverage)}",
             f"{'view':<22} {'F1':<28} {'accuracy':<28}"]
    views = (("row", audit.row), ("equal_interaction", audit.equal_interaction),
             ("interaction_majority", audit.interaction_majority))
    for name, view in views:
        m = view.metrics
        lines.append(f"{name:<22} {_f(m.f1):<28} {_f(m.accuracy):<28}")
    return "\n".join(lines)


def format_tool_lookup(audit: ToolLookupAudit) -> str:
    lines = [f"rows {audit.rows}, interactions {audit.interactions}, distinct tool keys "
             f"{audit.distinct_keys}, rows without a tool name {audit.empty_key_rows}",
             f"{'evaluation':<26} {'F1 (pooled)':<28} {'accuracy':<28}",
             f"{'in-sample':<26} {_f(audit.in_sample.f1):<28} "
             f"{_f(audit.in_sample.accuracy):<28}"]
    cv = audit.grouped_cv
    lines.append(f"{'grouped CV (' + str(cv.folds) + ' folds)':<26} "
                 f"{_f(cv.pooled.f1):<28} {_f(cv.pooled.accuracy):<28}")
    lines.append(f"  seen tool coverage {_f(cv.seen_tool_coverage)}")
    lodo = audit.leave_one_domain_out
    if lodo is not None:
        lines.append(f"{'leave-one-domain-out':<26} {_f(lodo.pooled.f1):<28} "
                     f"{_f(lodo.pooled.accuracy):<28}")
        lines.append(f"  seen tool coverage {_f(lodo.seen_tool_coverage)}")
        for dom, block in lodo.per_split.items():
            lines.append(f"  held out {dom:<15} {_f(block.f1):<28} "
                         f"unseen keys {block.unseen_key_rows}/{block.rows}")
    lines.append(f"rows whose tool occurs in another domain "
                 f"{_f(cv.cross_domain_tool_row_coverage)}")
    lines.append("may show: " + audit.interpretation.may_show)
    lines.append("may not show: " + audit.interpretation.may_not_show)
    return "\n".join(lines)


def format_guard_lookup(g: GuardLookup) -> str:
    """The guard part of rung 1, under the label lookup's table."""
    lines = [f"guard predictions ({g.source}): {g.rows} rows, {g.valid} valid, "
             f"{g.missing} without a prediction (fail closed)",
             f"{'guard vs gold':<26} {_f(g.guard.f1):<28} {_f(g.guard.accuracy):<28}"]
    for dom, score in g.guard_by_domain.items():
        lines.append(f"  {dom:<24} {_f(score.f1):<28} {_f(score.accuracy):<28}")
    lines.append("lookup fitted to the guard's decisions (F1, accuracy vs the guard):")
    for name, ev in g.decision_lookup.items():
        vs = g.vs_label_lookup[name]
        shown = name.replace("grouped_cv", "grouped CV").replace("_", "-")
        lines.append(f"  {shown:<24} {_f(ev.pooled.f1):<28} {_f(ev.pooled.accuracy):<28}")
        lines.append(f"    guard = label lookup {_f(vs['agreement'])}; guard accuracy where "
                     f"the lookup is right {_f(vs['guard_accuracy_where_lookup_right'])}, "
                     f"wrong {_f(vs['guard_accuracy_where_lookup_wrong'])}")
    lines.append("may show: " + g.interpretation.may_show)
    lines.append("may not show: " + g.interpretation.may_not_show)
    return "\n".join(lines)
