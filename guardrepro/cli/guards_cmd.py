"""``guardrepro guards``: list the guard adapters of the registry.

Output: one line per adapter (name, scoring, whether it needs a model and a
template, score mapping, source), or with ``--json`` one JSON object per
line with the same fields plus the parser version.
"""

from __future__ import annotations

import json
from typing import Any

import click


@click.command("guards")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per adapter.")
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
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, ensure_ascii=False))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        model = "model" if r["model"] else "no model"
        click.echo(f"{r['name']:<{width}}  {r['scoring']:<5}  {model:<8}  template "
                   f"{r['template']:<8}  {r['scores']}")
        click.echo(f"{'':<{width}}  source: {r['source']}; tokens: {r['special_tokens']}")
