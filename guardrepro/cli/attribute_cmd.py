"""``guardrepro attribute``: one cause for every row that disagrees with a reference.

Input: ``--reference`` (a gate spec TOML such as ``checks/ts-guard-agentdojo.toml``,
whose reference may be the released predictions, or a run directory / records
JSONL), ``--bf16`` (the unquantized greedy run), ``--quantized`` (repeatable),
``--sampled`` (repeatable: K seeded runs of a sampled profile). Output: the
summary table on stdout (noise floor, counts per cause with cluster-bootstrap
intervals, margins, one line per disagreeing row); with ``--json`` the full
attribution on stdout instead (the table on stderr); ``--out FILE`` also
writes it as JSON (the HTML report reads RUN_DIR/attribution.json). Exit 0:
attribution is measurement, not a gate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from guardrepro.checks.core.bootstrap import DEFAULT_REPLICATES, DEFAULT_SEED
from guardrepro.cli.options import (
    JSON_OPTION,
    REPLICATES,
    RUN_OR_FILE,
    SEED,
    emit,
    home_option,
    say,
)

if TYPE_CHECKING:
    from guardrepro.rundir.read import RecordsFile

RUN = RUN_OR_FILE


@click.command(short_help="One cause for each disagreement with a reference.")
@click.option("--reference", "reference", required=True, type=RUN,
              help="Gate spec TOML (its reference: released predictions or records), or a "
              "run directory / records.jsonl used as the reference.")
@click.option("--bf16", "bf16", type=RUN, default=None,
              help="The unquantized greedy run (BF16, or float32 for the toy guard).")
@click.option("--quantized", "quantized", type=RUN, multiple=True,
              help="A quantized greedy run of the same backend family (repeatable).")
@click.option("--sampled", "sampled", type=RUN, multiple=True,
              help="A seeded run in the authors' sampled mode (repeatable; K repeats).")
@click.option("--out", "json_out", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also write the full attribution (every row) as JSON here.")
@JSON_OPTION
@click.option("--replicates", type=REPLICATES, default=DEFAULT_REPLICATES,
              show_default=True, help="Cluster-bootstrap replicates.")
@click.option("--seed", type=SEED, default=DEFAULT_SEED, show_default=True,
              help="Bootstrap seed.")
@home_option
def attribute(reference: Path, bf16: Path | None, quantized: tuple[Path, ...],
              sampled: tuple[Path, ...], json_out: Path | None, as_json: bool,
              replicates: int, seed: int, home: Path | None) -> None:
    """Assign each disagreement with the reference exactly one cause, tested in
    order: identical (the reference's own tokens, whatever their parse state),
    sampling, quantization, backend, else unexplained.

    \b
    TS-Guard (K = 5 sampled repeats, vLLM BF16, MLX Q8):
      for s in 1 2 3 4 5; do guardrepro run --profile runners/vllm-bf16-sampled.toml \\
        --cohort cohort.jsonl --out runs/sampled-s$s --seed $s; done
      guardrepro attribute --reference checks/ts-guard-agentdojo.toml \\
        --bf16 runs/ts-guard-bf16 --quantized runs/ts-guard-q8 \\
        --sampled runs/sampled-s1 ... --sampled runs/sampled-s5
    """
    from guardrepro.checks.parity.attribute import attribute as run_attribution
    from guardrepro.checks.parity.attribute import format_table, write_json
    from guardrepro.checks.parity.loaders import load_reference, load_run_input

    read = _reader()
    ref, key_field, info = load_reference(
        reference if reference.is_file() and reference.suffix == ".toml" else read(reference),
        home)
    att = run_attribution(
        ref, key_field=key_field, reference_info=info,
        bf16=load_run_input(read(bf16), key_field) if bf16 is not None else None,
        quantized=[load_run_input(read(q), key_field) for q in quantized],
        sampled=[load_run_input(read(s), key_field) for s in sampled],
        replicates=replicates, seed=seed)
    emit(as_json, att.to_dict(), format_table(att))
    if json_out is not None:
        write_json(att, json_out)
        say(as_json)(f"wrote {json_out}")


def _reader() -> Callable[[Path], RecordsFile]:
    """Reads a run's records once per verb: a path given twice (say as the
    reference and as --bf16) is read and hashed once."""
    from guardrepro.rundir.read import read_records_file
    from guardrepro.rundir.records import records_path

    done: dict[Path, RecordsFile] = {}

    def read(path: Path) -> RecordsFile:
        key = records_path(path).resolve()
        if key not in done:
            done[key] = read_records_file(path)
        return done[key]
    return read
