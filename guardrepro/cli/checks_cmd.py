"""``guardrepro gate``, ``guardrepro stats`` and ``guardrepro audit``.

PATH is a run directory or a predictions JSONL file
(``guardrepro.checks.io.predictions``). Every verb here takes ``--json`` (the
result on stdout, human lines on stderr; see ``guardrepro.cli``).

- ``gate PATH --spec checks/X.toml [--conservative] [--cohort FILE] [--out DIR]``:
  writes gate.json (into --out, else the run directory, else the directory
  holding the predictions file), prints the check table and the one-line
  verdict with its causal interpretation; exit 0 when the gate passes, 3 when
  it fails (``GateFailed``, raised after gate.json is written), 2 on unusable
  input.
- ``stats PATH [--seed N] [--replicates N] [--confidence C] [--cohort FILE]
  [--out DIR]``: writes stats.json (``PRED.stats.json`` for a predictions
  file ``PRED.jsonl``) atomically, in the same place as gate.json, and
  prints the table. A negative seed, fewer than 1 replicate or a confidence outside
  (0, 1) is a usage error (exit 2).
  ``--export FILE`` (repeatable) also writes every figure as a CSV or Parquet
  table.
- ``audit interaction --benchmark agentdojo|agentharm [--preds released|RUN_DIR]``
  and ``audit tool-lookup``: benchmark audits, printed as a table; ``--out``
  also writes the JSON to a file. The benchmark comes from ``--data-dir`` or, by
  default, the fetched ``--lock`` (in ``--home``).
- ``audit association --benchmark agentdojo|agentharm [--preds released|RUN_DIR]
  [--only-recorded] [--replicates N] [--seed S]``: rung 2 of the audit ladder
  (``checks.audits.association``), same outputs as the other audits.
- ``audit ladder``: the three rungs and what each may and may not show.
  The rung-1 (tool-lookup) and rung-3 (stats) outputs carry their rung's
  statements under ``interpretation``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from guardrepro.checks.core.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_REPLICATES, DEFAULT_SEED
from guardrepro.cli.options import (
    COHORT_OPTION,
    CONFIDENCE,
    JSON_OPTION,
    OUT_OPTION,
    PROGRESS_OPTION,
    REPLICATES,
    RUN_OR_FILE,
    SEED,
    SpecFile,
    emit,
    home_option,
    say,
)
from guardrepro.errors import GateFailed


@click.command(short_help="Gate a run against a spec's reference predictions.")
@click.argument("path", type=RUN_OR_FILE)
@click.option("--spec", required=True, type=SpecFile("checks"),
              help="Gate spec (checks/*.toml, or its bare name).")
@click.option("--conservative", is_flag=True,
              help="Test ratio thresholds against the bootstrap lower bound.")
@COHORT_OPTION
@OUT_OPTION
@home_option
@JSON_OPTION
def gate(path: Path, spec: Path, conservative: bool, cohort: Path | None,
         out: Path | None, home: Path | None, as_json: bool) -> None:
    """Gate the original rows of a run (or predictions file) against the spec's
    reference predictions."""
    from guardrepro.checks.parity.gate import format_table
    from guardrepro.checks.parity.rows import format_agreement, gate_run
    from guardrepro.rundir.outputs import GATE_JSON, output_dir, write_json_atomic

    result = gate_run(path, spec, cohort=cohort, home=home, conservative=conservative)
    data = result.to_dict()
    # the verdict is printed before gate.json is written, so an unwritable
    # output directory (exit 2) still shows it
    agreement = "" if result.agreement is None else format_agreement(result.agreement) + "\n"
    emit(as_json, data, format_table(result) + "\n" + agreement + result.verdict)
    written = write_json_atomic(output_dir(path, out) / GATE_JSON, data)
    say(as_json)(f"wrote {written}")
    if not result.passed:
        raise GateFailed(result.verdict)


@click.command(short_help="Accuracy and flip statistics with intervals.")
@click.argument("path", type=RUN_OR_FILE)
@click.option("--seed", type=SEED, default=DEFAULT_SEED, show_default=True,
              help="Bootstrap seed (numpy default_rng, fresh per interval).")
@click.option("--replicates", type=REPLICATES, default=DEFAULT_REPLICATES,
              show_default=True, help="Bootstrap replicates.")
@click.option("--confidence", type=CONFIDENCE,
              default=DEFAULT_CONFIDENCE, show_default=True, help="Interval confidence.")
@COHORT_OPTION
@OUT_OPTION
@click.option("--export", "exports", type=click.Path(dir_okay=False, path_type=Path),
              multiple=True, help="Also write every figure as one table row, CSV or "
              "Parquet by the suffix (.csv, .parquet); repeatable.")
@PROGRESS_OPTION
@JSON_OPTION
def stats(path: Path, seed: int, replicates: int, confidence: float, cohort: Path | None,
          out: Path | None, exports: tuple[Path, ...], progress: bool, as_json: bool) -> None:
    """Strict accuracy per variant and paired flip statistics with intervals;
    writes stats.json in a run directory, PRED.stats.json beside (or, with --out,
    in) a predictions file PRED.jsonl, so two files' stats never share a name."""
    from guardrepro.checks.audits.association import format_rung
    from guardrepro.checks.audits.ladder import interpretation
    from guardrepro.checks.io.predictions import stream_rows
    from guardrepro.checks.stats.cache import keyed
    from guardrepro.checks.stats.compute import compute_stats, format_table
    from guardrepro.rundir.outputs import write_stats
    from guardrepro.rundir.stream import RunRowsRead

    run = stream_rows(path, cohort)
    rung = interpretation(3)
    result = compute_stats(run.rows, replicates=replicates, seed=seed, confidence=confidence,
                           progress=progress, expected_source=run.expected_source).with_extra(
        run_dir=str(path), interpretation=rung.to_dict())
    if isinstance(run, RunRowsRead):  # the key that lets report / gr.stats reuse stats.json
        result = keyed(result, run)
    data = result.to_dict()
    table = format_table(result) + "\n" + format_rung(rung)
    written = write_stats(path, out, data)
    emit(as_json, data, table)
    say(as_json)(f"wrote {written}")
    for target in exports:
        say(as_json)(f"wrote {result.export(target)}")


@click.group(short_help="Audits of the benchmark itself (no model).")
def audit() -> None:
    """Audits of the benchmark itself (no model)."""


BENCHMARKS = ("agentdojo", "agentharm")
DATA_OPTIONS = [
    click.option("--data-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                 default=None, help="Directory holding the ToolSafe files at their paths."),
    click.option("--lock", type=SpecFile("locks"), default=None,
                 help="Data lock (a file or a shipped lock's name) to materialize when"
                 " --data-dir is not given [default: with --preds RUN_DIR, the data lock"
                 " of the run's cohort; else toolsafe]."),
    click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
                 help="Also write the JSON here (atomically)."),
    JSON_OPTION,
]


def _data_options(f: Any) -> Any:
    for option in reversed(DATA_OPTIONS):
        f = option(f)
    return home_option(f)


def _source(preds: str | None, lock: Path | None, benchmark: str | None,
            choices: Sequence[str]) -> tuple[Path, str]:
    """The data lock and benchmark: as given, else those of the cohort the run
    directory in ``preds`` was made of, else the shipped ToolSafe lock and
    AgentDojo."""
    from guardrepro.errors import InputError
    from guardrepro.spec_dirs import spec_path

    run_lock = run_benchmark = None
    if preds not in (None, "released") and (lock is None or benchmark is None):
        from guardrepro.rundir.cohort import run_data_source

        source = run_data_source(Path(str(preds)))
        run_lock, run_benchmark = source.data_lock, source.benchmark
    if benchmark is None and run_benchmark is not None and run_benchmark not in choices:
        raise InputError(f"the run's cohort is over benchmark {run_benchmark!r}, which this "
                         f"audit does not take ({', '.join(choices)})", field="benchmark")
    return (lock or run_lock or spec_path("toolsafe", "locks"),
            benchmark or run_benchmark or "agentdojo")


def _data_dir(data_dir: Path | None, lock: Path, home: Path | None) -> Path:
    if data_dir is not None:
        return data_dir
    from guardrepro.artifacts.fetch import materialize

    return materialize(lock, home)


def _emit(result: dict[str, Any], table: str, out: Path | None, as_json: bool) -> None:
    from guardrepro.rundir.outputs import write_json_atomic

    emit(as_json, result, table)
    if out is not None:
        write_json_atomic(out, result)
        say(as_json)(f"wrote {out}")


def _predictions(root: Path, rows: list[Any], benchmark: str, preds: str
                 ) -> tuple[list[float | None], set[str] | None]:
    """One prediction per benchmark row: the released ones, or a run's
    original-variant records (a row without a record is None, fails closed),
    read once; and the base ids holding an original record (None for the
    released predictions, which cover every row)."""
    from guardrepro.checks.audits.benchmark import released_preds, run_preds

    if preds == "released":
        from guardrepro.bench.released import load_released

        return released_preds(rows, load_released(root, benchmark)), None
    from guardrepro.rundir.read import read_records_file

    return run_preds(rows, read_records_file(Path(preds)))  # read once


def _missing(rows: list[Any], recorded: set[str] | None) -> int:
    """Benchmark rows without an original record (0 for the released predictions)."""
    if recorded is None:
        return 0
    return sum(1 for row in rows if row.base_sample_id not in recorded)


@audit.command("interaction", short_help="Row vs interaction-level strict F1.")
@click.option("--benchmark", type=click.Choice(BENCHMARKS), default=None,
              help="[default: with --preds RUN_DIR, the benchmark of the run's cohort; else "
              "agentdojo]")
@click.option("--preds", default="released", show_default=True,
              help="'released' (the pinned released predictions) or a run directory.")
@_data_options
def interaction(benchmark: str | None, preds: str, data_dir: Path | None, lock: Path | None,
                out: Path | None, as_json: bool, home: Path | None) -> None:
    """Row vs equal-interaction vs interaction-majority strict F1."""
    from guardrepro.bench.tsbench import load_benchmark
    from guardrepro.checks.audits.benchmark import format_interaction, interaction_audit

    lock, benchmark = _source(preds, lock, benchmark, BENCHMARKS)
    root = _data_dir(data_dir, lock, home)
    rows = load_benchmark(root, benchmark)
    values, _ = _predictions(root, rows, benchmark, preds)
    result = interaction_audit(rows, values).with_extra(benchmark=benchmark, preds=preds)
    _emit(result.to_dict(), format_interaction(result), out, as_json)


@audit.command("tool-lookup", short_help="Tool-name lookup diagnostic (rung 1).")
@click.option("--benchmark", type=click.Choice(BENCHMARKS), default=None,
              help="[default: with --preds RUN_DIR, the benchmark of the run's cohort; else "
              "agentdojo]")
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True,
              help="At most this many grouped-CV folds (fewer when there are fewer groups).")
@click.option("--preds", default=None,
              help="Also audit a guard: 'released' (the pinned released predictions) or a "
              "run directory over the split (its original-variant records; a row without "
              "one fails closed).")
@_data_options
def tool_lookup(benchmark: str | None, folds: int, preds: str | None, data_dir: Path | None,
                lock: Path | None, out: Path | None, as_json: bool, home: Path | None) -> None:
    """Tool-name lookup diagnostic: grouped CV vs leave-one-domain-out; with
    --preds, the same lookup on that guard's decisions."""
    from guardrepro.bench.tsbench import load_benchmark
    from guardrepro.checks.audits.benchmark import (
        format_guard_lookup,
        format_tool_lookup,
        guard_lookup,
        tool_lookup_audit,
    )

    lock, benchmark = _source(preds, lock, benchmark, BENCHMARKS)
    root = _data_dir(data_dir, lock, home)
    rows = load_benchmark(root, benchmark)
    result = tool_lookup_audit(rows, max_splits=folds).with_extra(benchmark=benchmark)
    table = format_tool_lookup(result)
    if preds is not None:
        values, recorded = _predictions(root, rows, benchmark, preds)
        guard = guard_lookup(rows, values, source=preds, missing=_missing(rows, recorded),
                             max_splits=folds)
        result = result.with_extra(guard=guard.to_dict())
        table += "\n" + format_guard_lookup(guard)
    _emit(result.to_dict(), table, out, as_json)


@audit.command("association", short_help="Decisions vs nuisance features (rung 2).")
@click.option("--benchmark", type=click.Choice(BENCHMARKS), default=None,
              help="[default: with --preds RUN_DIR, the benchmark of the run's cohort; else "
              "agentdojo]")
@click.option("--preds", default="released", show_default=True,
              help="'released' (the pinned released predictions) or a run directory "
              "(its original-variant records).")
@click.option("--only-recorded", is_flag=True,
              help="With a run directory: audit only the benchmark rows that have a record "
              "(the count left out is reported); by default a row without one fails closed.")
@click.option("--replicates", type=REPLICATES, default=DEFAULT_REPLICATES, show_default=True,
              help="Bootstrap replicates of the safe-row marker difference.")
@click.option("--seed", type=SEED, default=DEFAULT_SEED, show_default=True,
              help="Bootstrap seed (numpy default_rng, fresh).")
@_data_options
def association(benchmark: str | None, preds: str, only_recorded: bool, replicates: int,
                seed: int, data_dir: Path | None, lock: Path | None, out: Path | None,
                as_json: bool, home: Path | None) -> None:
    """Rung 2: the guard's decisions vs nuisance features (observational)."""
    from guardrepro.bench.tsbench import load_benchmark
    from guardrepro.checks.audits.association import association_audit, format_association
    from guardrepro.errors import InputError

    if only_recorded and preds == "released":
        raise InputError("--only-recorded applies to a run directory's predictions",
                         field="only_recorded")
    lock, benchmark = _source(preds, lock, benchmark, BENCHMARKS)
    root = _data_dir(data_dir, lock, home)
    rows = load_benchmark(root, benchmark)
    values, recorded = _predictions(root, rows, benchmark, preds)
    left_out = 0
    if only_recorded:
        assert recorded is not None  # a run directory's predictions (checked above)
        keep = [i for i, row in enumerate(rows) if row.base_sample_id in recorded]
        left_out = len(rows) - len(keep)
        rows, values = [rows[i] for i in keep], [values[i] for i in keep]
    result = association_audit(rows, values, benchmark, replicates=replicates,
                               seed=seed).with_extra(preds=preds,
                                                     rows_without_record_left_out=left_out)
    _emit(result.to_dict(), format_association(result), out, as_json)


@audit.command("ladder", short_help="What each audit rung may and may not show.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the JSON here (atomically).")
@JSON_OPTION
def ladder_cmd(out: Path | None, as_json: bool) -> None:
    """The audit ladder: what each rung may and may not be taken to show."""
    from guardrepro.checks.audits.association import format_ladder, ladder

    result = ladder()
    _emit(result.to_dict(), format_ladder(result), out, as_json)
