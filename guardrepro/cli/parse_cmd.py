"""``guardrepro parse`` and ``guardrepro reparse``: the parser without a model.

``parse --guard NAME`` reads JSON lines ``{"id": str|int, "text": str}``
(stdin, or ``--input FILE``) and writes one JSON line per input line, in
order: ``{"id", "status": "ok"|"error", "score", "error_type",
"components"}``. A malformed input line stops the command with an error
naming the line number (exit code 2); lines before it have been written.

``reparse`` re-parses the raw guard outputs stored in a released
``meta_data.json`` (the ``guard_res["reason"]`` string, see
``guardrepro.bench.released``; the files come from DATA_DIR, from ``--lock``'s
fetched cache, or from three explicit paths) and reports per row whether
the parse reproduces the released prediction: one JSON line per row, then a final
``{"summary": {...}}`` line (counts, agreement with its denominator), and a
readable summary on stderr. Exit code 0 whatever the agreement: this is a
measurement, not a gate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import click

from guardrepro.bench.released import (
    ReleasedSet,
    align_released,
    load_released,
    reparse_released,
    reparse_summary,
)
from guardrepro.bench.tsbench import BENCHMARK_FILES
from guardrepro.cli.options import SpecFile, echo, home_option
from guardrepro.errors import InputError
from guardrepro.guards.base import ParseResult
from guardrepro.guards.registry import get_parser
from guardrepro.limits import load_json


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def parse_lines(
    lines: Iterable[str], parser: Callable[[str], ParseResult], *, source: str
) -> Iterable[dict[str, Any]]:
    """Parse JSON-lines input lazily; malformed lines raise ``InputError``."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            raise InputError(f"line {lineno}: blank line", file=source)
        item = load_json(line, file=source, line=lineno)
        if not isinstance(item, dict):
            raise InputError(
                f"line {lineno}: expected a JSON object, got {type(item).__name__}", file=source
            )
        keys = set(item)
        if keys != {"id", "text"}:
            diff = sorted(keys ^ {"id", "text"})
            raise InputError(
                f"line {lineno}: expected exactly the keys 'id' and 'text', found {sorted(keys)}",
                file=source,
                field=diff[0],
            )
        if isinstance(item["id"], bool) or not isinstance(item["id"], str | int):
            raise InputError(
                f"line {lineno}: id must be a string or an integer", file=source, field="id"
            )
        if not isinstance(item["text"], str):
            raise InputError(f"line {lineno}: text must be a string", file=source, field="text")
        result = parser(item["text"])
        yield {
            "id": item["id"],
            "status": result.status,
            "score": result.score,
            "error_type": result.error_type,
            "components": dict(result.components),
        }


@click.command(short_help="Parse guard outputs given as JSON lines (no model).")
@click.option(
    "--guard",
    "guard_name",
    default="ts-guard",
    show_default=True,
    help="Whose output format to parse: a guard name (`guardrepro guards`) or a guard spec path.",
)
@click.option(
    "--input",
    "input_file",
    type=click.File("rb"),
    default="-",
    show_default=True,
    help="JSON-lines input ('-' is stdin).",
)
def parse(guard_name: str, input_file: IO[bytes]) -> None:
    """Parse guard outputs given as JSON lines {"id", "text"} and write one
    JSON line {"id", "status", "score", "error_type", "components"} each."""
    parser = get_parser(guard_name)
    name = getattr(input_file, "name", "-")
    source = "<stdin>" if name in ("-", "<stdin>") else str(name)
    for record in parse_lines(utf8_lines(input_file, source), parser, source=source):
        click.echo(_dumps(record))


def utf8_lines(raw: Iterable[bytes], source: str) -> Iterator[str]:
    """Decode lines as UTF-8; a bad byte is an InputError naming file, line and column."""
    for lineno, line in enumerate(raw, start=1):
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"line {lineno}: not valid UTF-8 (byte 0x{line[exc.start]:02x} at column"
                f" {exc.start + 1})",
                file=source,
            ) from None


def _load_set(
    data_dir: Path | None,
    lock: Path | None,
    benchmark: str | None,
    preds: Path | None,
    labels: Path | None,
    meta: Path | None,
    home: Path | None = None,
) -> ReleasedSet:
    files = (preds, labels, meta)
    if lock is not None:
        if data_dir is not None:
            raise InputError("give either DATA_DIR or --lock, not both")
        from guardrepro.artifacts.fetch import materialize

        data_dir = Path(materialize(lock, home))
    if data_dir is not None:
        if any(f is not None for f in files):
            raise InputError("give either DATA_DIR (or --lock) or the three file paths")
        if benchmark is None:
            raise InputError("DATA_DIR and --lock need --benchmark", field="benchmark")
        return load_released(data_dir, benchmark)
    if preds is None or labels is None or meta is None:
        raise InputError(
            "give DATA_DIR (or --lock) with --benchmark, or all of --preds, --labels and "
            "--meta-data"
        )
    return align_released(preds, labels, meta, None, benchmark=benchmark)


def _describe(summary: dict[str, Any], released: ReleasedSet) -> str:
    name = released.benchmark or "released files"
    agreement = summary["agreement"]
    rate = "n/a" if agreement is None else f"{agreement:.4f}"
    lines = [
        f"reparse of {name}: {summary['reproduced']}/{summary['denominator']} rows reproduce "
        f"the released prediction (agreement {rate})",
        f"  not reproduced: {summary['not_reproduced']}; released null predictions: "
        f"{summary['released_null']}; re-parse errors: {summary['reparse_errors']}",
    ]
    for error_type, count in summary["error_types"].items():
        lines.append(f"  {error_type}: {count}")
    return "\n".join(lines)


@click.command(short_help="Re-parse released raw outputs against their predictions.")
@click.argument(
    "data_dir", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option(
    "--lock",
    type=SpecFile("locks", exists=True),
    default=None,
    help="Use the fetched, verified files of this lock (e.g. locks/toolsafe.toml) as DATA_DIR.",
)
@click.option(
    "--benchmark",
    type=click.Choice(sorted(BENCHMARK_FILES)),
    default=None,
    help="Which released set below DATA_DIR (ToolSafe layout).",
)
@click.option(
    "--preds",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="preds.json (instead of DATA_DIR).",
)
@click.option(
    "--labels",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="labels.json (instead of DATA_DIR).",
)
@click.option(
    "--meta-data",
    "meta",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="meta_data.json (instead of DATA_DIR).",
)
@click.option(
    "--guard",
    "guard_name",
    default="ts-guard",
    show_default=True,
    help="Whose parser to apply: a guard name or a guard spec path.",
)
@home_option
def reparse(
    data_dir: Path | None,
    lock: Path | None,
    benchmark: str | None,
    preds: Path | None,
    labels: Path | None,
    meta: Path | None,
    guard_name: str,
    home: Path | None,
) -> None:
    """Re-parse the raw outputs in a released meta_data.json and report, row
    by row, whether they reproduce the released predictions.

    With DATA_DIR (a ToolSafe checkout) or --lock (its fetched files) and
    --benchmark, the released files are first aligned with the TS-Bench rows; with --preds,
    --labels and --meta-data only the files' own consistency is checked and
    domains are unknown. Writes JSON lines to stdout (one per row, then a
    summary line) and a readable summary to stderr."""
    released = _load_set(data_dir, lock, benchmark, preds, labels, meta, home)
    rows = reparse_released(released, get_parser(guard_name))
    summary = reparse_summary(rows)
    for row in rows:
        click.echo(_dumps(row.to_dict()))
    click.echo(_dumps({"summary": {"benchmark": released.benchmark, **summary}}))
    echo(_describe(summary, released), err=True)
