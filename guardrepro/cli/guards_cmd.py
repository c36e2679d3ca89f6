"""``guardrepro guards``: the guard specs, and a starting spec for a checkpoint.

``guards`` lists the shipped specs (``guards/`` of the checkout or the wheel)
and the local ones (``./guards/*.toml``), and each ``--spec PATH`` given: one
entry per guard (name, where its spec is, scoring, whether it needs a model
and a template, score mapping, source, special tokens, parser version); with
``--json`` a JSON list of objects with the same fields (the lines then go to
stderr). A local spec whose name a shipped spec already has is listed as
shadowed (a bare name always means the shipped one).

``guards new NAME --from CHECKPOINT_DIR`` writes ``guards/NAME.toml`` and
``runners/NAME-hf.toml`` under ``--out`` (default: the current directory),
filled in from the checkpoint's config, tokenizer and chat template
(``run.guard_scaffold``), and prints what the user must still decide.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from guardrepro.cli.options import JSON_OPTION, echo, emit


def _row(spec: Any, origin: str) -> dict[str, Any]:
    from guardrepro.guards.adapter import SpecGuard, expected_of
    from guardrepro.guards.base import GuardTemplate

    tokens = expected_of(spec)
    adapter = SpecGuard(spec, GuardTemplate("", "") if spec.needs_template else None)
    return {"name": spec.name, "origin": origin, "spec": str(spec.path),
            "spec_sha256": spec.sha256, "scoring": spec.scoring, "model": spec.needs_model,
            "template": "profile" if spec.needs_template else "built-in",
            "parser": spec.parser.kind, "parser_version": adapter.parser_version,
            "scores": spec.scores,
            "special_tokens": tokens.describe() if tokens.eos or tokens.pad else
            ("checkpoint's own" if spec.needs_model else "none"),
            "source": spec.source}


def _rows(extra: tuple[Path, ...]) -> list[dict[str, Any]]:
    from guardrepro.guards.spec import (
        find_spec,
        load_spec,
        local_dir,
        local_names,
        shipped_names,
    )

    shipped = shipped_names()
    rows = [_row(find_spec(name), "shipped") for name in shipped]
    for name in local_names():
        origin = "local (shadowed by the shipped spec)" if name in shipped else "local"
        rows.append(_row(load_spec(local_dir() / f"{name}.toml", "local"), origin))
    rows += [_row(load_spec(path.resolve()), "path") for path in extra]
    return rows


@click.group("guards", invoke_without_command=True,
             short_help="List the guard specs; write a new one.")
@click.option("--spec", "specs", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Also show this guard spec file (repeatable).")
@JSON_OPTION
@click.pass_context
def guards(ctx: click.Context, specs: tuple[Path, ...], as_json: bool) -> None:
    """List the guard specs: shipped, local (./guards/) and --spec files."""
    if ctx.invoked_subcommand is not None:
        return
    rows = _rows(specs)
    width = max(len(r["name"]) for r in rows)
    lines = []
    for r in rows:
        model = "model" if r["model"] else "no model"
        lines.append(f"{r['name']:<{width}}  {r['scoring']:<5}  {model:<8}  template "
                     f"{r['template']:<8}  {r['scores']}")
        lines.append(f"{'':<{width}}  {r['origin']}: {r['spec']}")
        lines.append(f"{'':<{width}}  source: {r['source']}; tokens: {r['special_tokens']}")
    emit(as_json, rows, "\n".join(lines))


@guards.command("new", short_help="Write a starting guard spec and run profile.")
@click.argument("name")
@click.option("--from", "checkpoint", required=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="The checkpoint folder (config, tokenizer, chat template).")
@click.option("--out", "out", default=Path("."), show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Where guards/NAME.toml and runners/NAME-hf.toml are written.")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
def new(name: str, checkpoint: Path, out: Path, force: bool) -> None:
    """Write guards/NAME.toml and runners/NAME-hf.toml for CHECKPOINT's guard."""
    from guardrepro.run.guard_scaffold import write_scaffold

    result = write_scaffold(name, checkpoint, out, force=force)
    echo(f"wrote {result.spec_path}")
    echo(f"wrote {result.profile_path}")
    echo("read from the checkpoint:")
    for line in result.facts:
        echo(f"  {line}")
    echo("still to decide:")
    for line in result.decide:
        echo(f"  - {line}")
