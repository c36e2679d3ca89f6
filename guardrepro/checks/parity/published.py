"""A run's figures beside the published ones (``checks/published/*.toml``).

Input: a published-figures spec (TOML; layout documented in
``checks/published/ts-guard-q8.toml``) and the run's documents by source:
``stats`` (the ``stats.json`` object computed from the run), ``gate`` (its
``gate.json`` object, or None when the run has none) and ``audit`` (None:
audit figures are not part of a run).

Output: a ``Comparison`` (frozen; ``to_dict()``), one ``Row`` per published
figure with the run's value, the difference and a status:

- ``match``: every published field equals the run's (exactly, or after
  rounding the run's value to the figure's ``decimals``);
- ``MISMATCH``: some field differs (fails the comparison when the figure's
  ``match`` is ``exact``; a ``reported`` figure only shows it as ``differs``);
- ``missing``: the run's statistics lack the figure (for example the run has
  no ``combined`` rows); fails like a mismatch for an exact figure;
- ``not computed``: the figure's source document is absent (no gate.json;
  audit figures).

Invariants: the spec is read strictly (keys outside the format, wrong types, a figure
with no published value: ``InputError`` naming the file and the key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from guardrepro.checks.core.formatting import fmt_num
from guardrepro.checks.core.serde import JsonValue, opt
from guardrepro.checks.parity.sides import Side, compare_sides, side_of, sides_line
from guardrepro.errors import InputError
from guardrepro.spec import Table, expect_kind, load_toml

SOURCES = ("stats", "gate", "audit")
MATCHES = ("exact", "reported")
NUMBERS = ("count", "denominator", "point", "lower", "upper")
FIGURE_KEYS = {"name", "source", "path", "match", "decimals", "text", *NUMBERS}


@dataclass(frozen=True)
class Figure:
    """One published figure: where the run keeps it and its published values."""

    name: str
    source: str
    path: str
    match: str
    decimals: int | None
    values: Mapping[str, float | int]
    text: str | None = None


@dataclass(frozen=True)
class PublishedSpec:
    name: str
    description: str
    path: Path
    figures: tuple[Figure, ...]
    subject: Mapping[str, str | None] | None = None  # [subject]: guard, checkpoint, cohort


def _figure(data: Any, index: int, file: str) -> Figure:
    table = Table(data, file, f"figure[{index}]")
    table.only(*FIGURE_KEYS)
    name = table.take("name", str)
    source = table.take("source", str)
    path = table.take("path", str)
    if source not in SOURCES:
        raise table.fail("source", f"must be one of {', '.join(SOURCES)}")
    match = table.take("match", str, "exact")
    if match not in MATCHES:
        raise table.fail("match", f"must be one of {', '.join(MATCHES)}")
    decimals = table.take("decimals", int, None)
    if decimals is not None and not 0 <= decimals <= 17:
        raise table.fail("decimals", "must be within 0..17")
    values: dict[str, float | int] = {}
    for key in NUMBERS:
        kinds = int if key in ("count", "denominator") else (int, float)
        value = table.take(key, kinds, None)
        if value is not None:
            values[key] = value
    text = table.take("text", str, None)
    if not values and text is None:
        raise table.fail("name", "a figure needs a published value (count, denominator, point, "
                         "lower, upper or text)")
    table.done()
    return Figure(name, source, path, match, decimals, values, text)


def load_published(path: str | Path) -> PublishedSpec:
    """Read a published-figures spec strictly."""
    path = Path(path)
    file = str(path)
    if not path.is_file():
        raise InputError("published-figures spec not found", file=file)
    data = load_toml(path, "published-figures spec")
    expect_kind(data, "published", file=file)
    top = Table(data, file)
    top.only("name", "description", "figure", "subject")
    name = top.take("name", str)
    description = top.take("description", str, "")
    figures = top.take("figure", list)
    if not figures:
        raise InputError("no figures", file=file, field="figure")
    subject = None
    if "subject" in top.data:
        sub = top.sub("subject")
        sub.only("guard", "checkpoint", "cohort")
        subject = {k: sub.take(k, str, None) for k in ("guard", "checkpoint", "cohort")}
        sub.done()
    top.done()
    return PublishedSpec(name, description, path,
                         tuple(_figure(t, i, file) for i, t in enumerate(figures)), subject)


def lookup(document: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted path, or None when any step is absent."""
    node: Any = document
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def run_values(value: Any) -> dict[str, Any] | None:
    """The run's figure in the spec's vocabulary (count/denominator/point/
    lower/upper/text) from a statistic, an accuracy or a ratio object."""
    if isinstance(value, str):
        return {"text": value}
    if isinstance(value, int) and not isinstance(value, bool):  # a count (``by_status``)
        return {"count": value}
    if not isinstance(value, Mapping):
        return None
    out: dict[str, Any] = {}
    if "numerator" in value:
        out["count"] = value["numerator"]
        out["point"] = value.get("value")
    for key in NUMBERS:
        if key in value:
            out[key] = value[key]
    return out or None


def _same(field: str, run: Any, published: Any, decimals: int | None) -> bool:
    if run is None:
        return False
    if field in ("count", "denominator") or decimals is None:
        return bool(run == published)
    return f"{run:.{decimals}f}" == f"{published:.{decimals}f}"


@dataclass(frozen=True)
class Row:
    figure: Figure
    run: Mapping[str, Any] | None
    status: str
    differing: tuple[str, ...]

    @property
    def fails(self) -> bool:
        return self.figure.match == "exact" and self.status in ("MISMATCH", "missing")

    @property
    def difference(self) -> float | int | None:
        """run minus published: of the point, else of the count."""
        if self.run is None:
            return None
        for key in ("point", "count"):
            pub, got = self.figure.values.get(key), self.run.get(key)
            if pub is not None and got is not None:
                return got - pub
        return None

    def to_dict(self) -> dict[str, Any]:
        f = self.figure
        return {"name": f.name, "source": f.source, "path": f.path, "match": f.match,
                "decimals": f.decimals,
                "published": dict(f.values) | ({"text": f.text} if f.text is not None else {}),
                "run": None if self.run is None else dict(self.run), "status": self.status,
                "differing": list(self.differing), "difference": self.difference,
                "fails": self.fails}


def compare_figure(figure: Figure, documents: Mapping[str, Mapping[str, Any] | None]) -> Row:
    document = documents.get(figure.source)
    if document is None:
        return Row(figure, None, "not computed", ())
    run = run_values(lookup(document, figure.path))
    if run is None:
        return Row(figure, None, "missing", ())
    differing = [k for k, v in figure.values.items()
                 if not _same(k, run.get(k), v, figure.decimals)]
    if figure.text is not None and run.get("text") != figure.text:
        differing.append("text")
    status = "match" if not differing else (
        "MISMATCH" if figure.match == "exact" else "differs")
    return Row(figure, run, status, tuple(differing))


@dataclass(frozen=True)
class Comparison(JsonValue):
    """Every figure of a spec against a run: written with the spec's file and name."""

    JSON_DERIVED: ClassVar[tuple[Any, ...]] = ("schema", ("spec", "spec_file"), "name",
                                               "passed")
    schema: ClassVar[str] = "guardrepro.vs_published/1"

    spec: PublishedSpec = opt(skip=True)
    rows: tuple[Row, ...] = opt()
    sources: Mapping[str, str] = opt()
    # checks.parity.sides.compare_sides(run, published)
    sides: Mapping[str, Any] | None = opt(omit_none=True, default=None)

    @property
    def spec_file(self) -> str:
        return str(self.spec.path)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def failed(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.fails)


def compare(spec: PublishedSpec, documents: Mapping[str, Mapping[str, Any] | None],
            sources: Mapping[str, str] | None = None,
            run_side: Side | None = None) -> Comparison:
    """Every figure of ``spec`` against the run's ``documents`` by source;
    ``run_side`` (what the run was) is set beside the spec's ``subject``."""
    sides = None
    if run_side is not None:
        sides = compare_sides(run_side, side_of(spec.subject or {}))
    return Comparison(spec, tuple(compare_figure(f, documents) for f in spec.figures),
                      dict(sources or {}), sides)


def _show(values: Mapping[str, Any] | None, decimals: int | None) -> str:
    if values is None:
        return "-"
    if "text" in values and values["text"] is not None:
        return str(values["text"])

    def num(x: Any) -> str:
        if x is None:
            return "-"
        return f"{x:.{decimals}f}" if decimals is not None else fmt_num(x)

    parts = []
    if "count" in values and "denominator" in values:
        parts.append(f"{values['count']}/{values['denominator']}")
    if values.get("point") is not None:
        parts.append(("= " if parts else "") + num(values["point"]))
    if "lower" in values or "upper" in values:
        parts.append(f"[{num(values.get('lower'))}, {num(values.get('upper'))}]")
    return " ".join(parts) if parts else "-"


def _shown_run(row: Row) -> dict[str, Any] | None:
    """The run's value restricted to the fields the figure publishes."""
    if row.run is None:
        return None
    keys = set(row.figure.values) | ({"text"} if row.figure.text is not None else set())
    if "point" in row.run and row.run["point"] is not None and "count" in keys:
        keys.add("point")
    return {k: v for k, v in row.run.items() if k in keys}


def format_comparison(comparison: Comparison) -> str:
    rows = [("figure", "published", "run", "difference", "status")]
    for r in comparison.rows:
        diff = r.difference
        shown = "-" if diff is None else (f"{diff:+d}" if isinstance(diff, int)
                                          else f"{diff:+.6g}")
        published: dict[str, Any] = dict(r.figure.values)
        if r.figure.text is not None:
            published["text"] = r.figure.text
        rows.append((r.figure.name, _show(published, r.figure.decimals),
            "not computed" if r.status == "not computed" else _show(_shown_run(r),
                                                                   r.figure.decimals),
            shown, r.status + (f" ({', '.join(r.differing)})" if r.differing else "")
            + ("" if r.figure.match == "exact" else " [reported]")))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [] if comparison.sides is None else [
        sides_line(comparison.sides, ("run", comparison.spec.name))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
             for row in rows]
    failed = comparison.failed
    lines.append(f"{comparison.spec.name}: {len(comparison.rows)} figures, "
                 f"{sum(r.status == 'match' for r in comparison.rows)} match, "
                 f"{len(failed)} exact figure(s) differ or are missing, "
                 f"{sum(r.status == 'not computed' for r in comparison.rows)} not computed")
    return "\n".join(lines)
