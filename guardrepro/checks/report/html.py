"""The self-contained HTML report: one file that opens offline.

Input: a run directory (records, manifest, ``stats.json``, optional
``gate.json`` and figures written by ``guardrepro.checks.report.markdown.build_report``), the
run's cohort (for the prompts), optionally an attribution JSON
(``guardrepro attribute --out``) and the reference records named in gate.json.

Output: ``report.html`` in the run directory, rendered with Jinja2 from
``guardrepro/templates/report.html.j2``: the gate verdict, the report tables
(``guardrepro.checks.report.markdown.report_tables``), the PNG figures inlined as data URIs,
and a per-row drill-down (filter by disagreement, flip and attribution cause;
open a row to see its rendered prompt with the spans edited against the
original variant highlighted, its output beside the comparison output with
the first divergent token marked, the parsed components, score and margin).

Invariants: the file references nothing outside itself (no CDN, no network:
styles, script, data and images are inline); every text from a record or
the cohort is HTML-escaped (Jinja2 autoescape, ``markupsafe.escape`` for the
pre-highlighted fragments); a prompt that cannot be rendered with the run's
guard template shows the row's fields instead, with the reason; a rendered
prompt whose hash differs from the record's ``input_sha256`` is flagged.
"""

from __future__ import annotations

import base64
import difflib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup, escape

from guardrepro.artifacts.store import read_hashed
from guardrepro.checks.parity.attribute import Attribution
from guardrepro.checks.parity.compare import first_divergence
from guardrepro.checks.parity.gate_types import GateResult
from guardrepro.checks.report.charts import CAPTIONS
from guardrepro.checks.report.hints import Hint, attribution_hint, gate_hint, report_hint
from guardrepro.checks.report.score_figures import (
    DRIFT_PNG,
    RELIABILITY_PNG,
    ROC_PR_PNG,
    SCORE_CAPTIONS,
    THRESHOLDS_PNG,
    score_summary,
)
from guardrepro.errors import GuardreproError, missing_extra
from guardrepro.guards.registry import record_parser
from guardrepro.limits import read_json_file
from guardrepro.rundir.manifest import RunManifest
from guardrepro.rundir.read import ORIGINAL, RowResult, variant_order
from guardrepro.rundir.records import parse_records, write_atomic
from guardrepro.schema import CohortRow, Record, sha256_text, strict_decision

if TYPE_CHECKING:
    from guardrepro.checks.report.markdown import ReportInputs

HTML_FILE = "report.html"
FIGURES = ("flip_rates.png", "score_confusion.png", "margin_hist.png", ROC_PR_PNG,
           RELIABILITY_PNG, THRESHOLDS_PNG, DRIFT_PNG)
_WORDS = re.compile(r"\s+|\w+|[^\w\s]")


def highlight_edits(original: str, edited: str) -> Markup:
    """``edited`` with the spans that differ from ``original`` marked
    (``<mark class="edit">`` for inserted or replaced text, ``<del>`` for
    removed text); word-level diff, everything escaped."""
    a, b = _WORDS.findall(original), _WORDS.findall(edited)
    out: list[str] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out.append(str(escape("".join(b[j1:j2]))))
            continue
        if i2 > i1:
            out.append(f'<del class="edit">{escape("".join(a[i1:i2]))}</del>')
        if j2 > j1:
            out.append(f'<mark class="edit">{escape("".join(b[j1:j2]))}</mark>')
    return Markup("".join(out))


def mark_divergence(text: str, other: str) -> Markup:
    """``text`` with everything from its first character that differs from
    ``other`` wrapped in ``<span class="diverge">``."""
    k = 0
    for x, y in zip(text, other, strict=False):
        if x != y:
            break
        k += 1
    if text == other:
        return Markup(escape(text))
    return Markup(f'{escape(text[:k])}<span class="diverge">{escape(text[k:])}</span>')


def fields_text(sample: Mapping[str, Any]) -> str:
    """The prompt's inputs when the template is unavailable: one block per field."""
    parts = []
    for key, val in sample.items():
        if key == "sample_id":
            continue
        shown = val if isinstance(val, str) else json.dumps(val, ensure_ascii=False)
        parts.append(f"{key}:\n{shown}")
    return "\n\n".join(parts)


def _renderer(manifest: RunManifest, home: str | Path | None) -> tuple[Any, str | None]:
    """(render(sample) -> text, None) with the run's guard template, or
    (None, reason) when the profile or its template cannot be used here.

    The profile path comes from the manifest, so it is read only when its text
    still hashes to the manifest's sha256, and the template only when it hashes to
    the run's ``template_sha256``; rule guards build their own template."""
    raw, recorded = manifest.profile.get("path"), manifest.profile.get("sha256")
    try:
        from guardrepro.guards.base import GuardTemplate
        from guardrepro.guards.registry import get_guard
        from guardrepro.run.profile import RunProfile
        from guardrepro.run.prompts import load_template

        if not isinstance(raw, str) or not Path(raw).is_file():
            return None, f"run profile {raw!r} not found"
        text = Path(raw).read_text(encoding="utf-8")
        if sha256_text(text) != recorded:
            return None, f"run profile {raw!r} changed since the run (sha256 differs)"
        spec = RunProfile.from_text(text, raw).guard
        template: GuardTemplate | None = None
        if spec.template_path is not None:
            body = spec.template_path.read_text(encoding="utf-8")
            template = GuardTemplate(text=body, sha256=sha256_text(body))
        elif spec.template_lock is not None and spec.template_file is not None:
            template = load_template(spec.template_lock, spec.template_file, home)
        guard = get_guard(spec.name, template)
        if guard.template.sha256 != manifest.provenance.template_sha256:
            return None, "guard template changed since the run (sha256 differs)"
        return guard.render, None
    except (GuardreproError, OSError, UnicodeDecodeError) as exc:
        return None, f"guard template unavailable ({exc})"


def _prompts(cohort: Sequence[CohortRow], render: Any) -> dict[str, str]:
    out = {}
    for row in cohort:
        out[row.row_id] = render(row.sample) if render else fields_text(row.sample)
    return out


def _output_pair(rec: Record | None, other: Record | None) -> dict[str, Any]:
    if rec is None:
        return {"a": Markup(""), "b": Markup(""), "token": None, "identical": None}
    if other is None:
        return {"a": Markup(escape(rec.output_text)), "b": None, "token": None,
                "identical": None}
    token = first_divergence(rec.output_token_ids, other.output_token_ids)
    return {"a": mark_divergence(rec.output_text, other.output_text),
            "b": mark_divergence(other.output_text, rec.output_text), "token": token,
            "identical": token is None}


def _strict(score: float | None, status: str) -> int | None:
    if status == "missing":
        return None
    return strict_decision(score)


def _row_item(r: RowResult, rec: Record | None, ctx: Mapping[str, Any]) -> dict[str, Any]:
    """One drill-down row: flags, texts (pre-escaped HTML) and numbers."""
    originals: dict[str, RowResult] = ctx["originals"]
    orig = originals.get(r.base_sample_id)
    flip = (r.variant != ORIGINAL and orig is not None and orig.present and r.present
            and _strict(r.score, r.status) != _strict(orig.score, orig.status))
    prompts: dict[str, str] = ctx["prompts"]
    prompt = prompts.get(r.row_id)
    orig_prompt = prompts.get(orig.row_id) if orig is not None else None
    if prompt is None:
        prompt_html = Markup("")
    elif r.variant != ORIGINAL and orig_prompt is not None:
        prompt_html = highlight_edits(orig_prompt, prompt)
    else:
        prompt_html = Markup(escape(prompt))
    hash_ok = None
    if prompt is not None and rec is not None and ctx["rendered"]:
        hash_ok = sha256_text(prompt) == rec.input_sha256
    ref = ctx["reference"].get(r.row_id)
    other_label: str | None
    if r.variant == ORIGINAL and ref is not None:
        other, other_label = ref, "reference"
    else:
        other = ctx["records"].get(orig.row_id) if orig is not None and orig is not r else None
        other_label = "original variant" if other is not None else None
    pair = _output_pair(rec, other)
    gate_agree = ctx["gate_agree"].get(r.row_id)
    both_invalid = r.row_id in ctx["both_invalid"]
    return {
        "row_id": r.row_id, "base_sample_id": r.base_sample_id, "variant": r.variant,
        "domain": r.domain, "gold_label": r.gold_label, "status": r.status, "score": r.score,
        "margin": r.decision_margin, "disagree": gate_agree is False and not both_invalid,
        "both_invalid": both_invalid, "flip": bool(flip),
        "cause": ctx["causes"].get(r.row_id), "components": json.dumps(
            dict(rec.components) if rec and rec.components else None, indent=1),
        "prompt": str(prompt_html), "prompt_hash_ok": hash_ok,
        "out_a": str(pair["a"]), "out_b": None if pair["b"] is None else str(pair["b"]),
        "out_b_label": other_label, "diverge_token": pair["token"],
        "other_score": None if other is None else other.score,
        "other_margin": None if other is None else other.decision_margin,
    }


def _causes(attribution: Attribution | None, label: str,
            hint: Hint) -> tuple[dict[str, str], str]:
    if attribution is None:
        return {}, (f"no attribution (run `{hint.text}`)" if hint.argv
                    else f"no attribution: {hint.text}")
    runs = {r.label: r for r in attribution.runs}
    if label not in runs:
        return {}, f"attribution has no run labelled {label!r} (runs: {sorted(runs)})"
    causes: dict[str, str] = {}
    for row in runs[label].rows:  # strict cause first, exact-only rows after
        if row.level == "strict" or row.row_id not in causes:
            causes[row.row_id] = row.cause
    return causes, f"causes from the attribution of run {label!r}"


def _reference_records(gate: GateResult | None) -> dict[str, Record]:
    ref = (gate.reference if gate is not None else None) or {}
    path = ref.get("path") if ref.get("type") == "records" else None
    if not isinstance(path, str) or not Path(path).is_file():
        return {}
    # a path from gate.json: used only when its bytes are the ones the gate read
    data, digest = read_hashed(Path(path))
    if digest != ref.get("sha256"):
        return {}
    return {r.row_id: r for r in parse_records(data, file=path, parsers=record_parser)}


def _figures(run_dir: Path) -> list[dict[str, str]]:
    out = []
    for name in FIGURES:
        path = run_dir / name
        if path.is_file():
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            out.append({"name": name, "src": f"data:image/png;base64,{data}",
                        "caption": {**CAPTIONS, **SCORE_CAPTIONS}.get(name, "")})
    return out


def _load_attribution(path: Path | None) -> Attribution | None:
    if path is None or not path.is_file():
        return None
    return Attribution.from_dict(read_json_file(path), file=str(path))


def _environment() -> Any:
    try:
        import jinja2
    except ImportError as exc:  # pragma: no cover - jinja2 is a core dependency
        raise missing_extra("the HTML report", "jinja2", None) from exc
    return jinja2.Environment(loader=jinja2.PackageLoader("guardrepro", "templates"),
                              autoescape=jinja2.select_autoescape(["html", "j2"]),
                              undefined=jinja2.StrictUndefined)


def build_html(run_dir: str | Path, *, cohort: str | Path | None = None,
               attribution: str | Path | None = None, out: str | Path | None = None,
               home: str | Path | None = None, inputs: ReportInputs | None = None) -> Path:
    """Write the run's self-contained ``report.html``; returns its path
    (``home``: the cache holding the guard's locked template; ``inputs``: the
    run, its stats and gate as the caller read them, ``report.report_inputs``)."""
    from guardrepro.checks.report.markdown import report_inputs, report_tables

    run_dir = Path(run_dir)
    if inputs is None:
        inputs = report_inputs(run_dir, cohort=cohort)
    run, stats, gate = inputs.data, inputs.stats, inputs.gate
    manifest = run.manifest
    cohort_path = run.cohort_path
    render, why = _renderer(manifest, home)
    rows_c = list(run.cohort.rows) if run.cohort is not None else []
    notes = [] if cohort_path else ["cohort file not found: prompts are not shown"]
    if cohort_path and why:
        notes.append(f"{why}: the drill-down shows the prompt's fields, not the rendered prompt")
    att_path = Path(attribution) if attribution else run_dir / "attribution.json"
    causes, cause_note = _causes(_load_attribution(att_path), run_dir.name,
                                 attribution_hint(run_dir, gate))
    notes.append(cause_note)
    records = run.by_id
    ctx: dict[str, Any] = {
        "originals": {r.base_sample_id: r for r in run.rows if r.variant == ORIGINAL},
        "prompts": _prompts(rows_c, render), "rendered": render is not None,
        "records": records, "reference": _reference_records(gate), "causes": causes,
        "gate_agree": {g.row_id: g.strict_agree for g in (gate.rows if gate else ())},
        "both_invalid": {d.row_id for d in (gate.disagreement_rows if gate else ())
                         if d.both_invalid}}
    items = [_row_item(r, records.get(r.row_id), ctx) for r in run.rows]
    html = _environment().get_template("report.html.j2").render(
        run_id=manifest.run_id, manifest=manifest, gate=gate, notes=notes,
        gate_hint=gate_hint(run_dir, manifest.provenance.guard).text,
        report_hint=report_hint(run_dir).text,
        tables=report_tables(stats, gate, variant_order([r.variant for r in run.rows])),
        figures=_figures(run_dir), scores=score_summary(stats.scores if stats else None),
        rows=items, causes=sorted(set(causes.values())),
        variants=variant_order([r.variant for r in run.rows]))
    path = Path(out) if out is not None else run_dir / HTML_FILE
    write_atomic(path, html)
    return path
