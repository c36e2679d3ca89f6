"""``guardrepro guards``: list the guard adapters of the registry.

Output: one line per adapter (name, scoring, whether it needs a model and a
template, score mapping, source), or with ``--json`` a JSON list of objects
with the same fields plus the parser version (the lines then go to stderr).
"""

from __future__ import annotations

from typing import Any

import click

from guardrepro.cli.options import JSON_OPTION, emit


@click.command("guards", short_help="List the guard adapters.")
@JSON_OPTION
def guards(as_json: bool) -> None:
    """List the guard adapters (name, scoring, scores, source)."""
    from guardrepro.guards.base import GuardTemplate
    from guardrepro.guards.registry import ADAPTERS

    rows: list[dict[str, Any]] = []
    for info in ADAPTERS.values():
        adapter = info.build(GuardTemplate("", "") if info.needs_template else None)
        rows.append({"name": info.name, "scoring": info.scoring, "model": info.needs_model,
                     "template": "profile" if info.needs_template else "built-in",
                     "parser_version": adapter.parser_version, "scores": info.scores,
                     "special_tokens": adapter.special_tokens.describe()
                     if adapter.special_tokens.eos else "none", "source": info.source})
    width = max(len(r["name"]) for r in rows)
    lines = []
    for r in rows:
        model = "model" if r["model"] else "no model"
        lines.append(f"{r['name']:<{width}}  {r['scoring']:<5}  {model:<8}  template "
                     f"{r['template']:<8}  {r['scores']}")
        lines.append(f"{'':<{width}}  source: {r['source']}; tokens: {r['special_tokens']}")
    emit(as_json, rows, "\n".join(lines))
