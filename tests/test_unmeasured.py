"""A guard that never answers in its format: the shipped toy checkpoint run under
the Qwen3Guard spec, whose parser looks for ``Safety: ...`` while the toy
answers in TS-Guard's tags, so every row fails to parse (real generation, no
fakes). The sweep must not recommend on decisions and choose by teacher-forced
KL; ``attribute`` must call token-identical rows identical; ``compare`` must
say that decisions are not measurable; ``run`` must warn, naming the parser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from extras import needs_matplotlib

from guardrepro.rundir.record_checks import UNPARSED_STATUSES
from guardrepro.rundir.records import read_records

pytestmark = [pytest.mark.slow, needs_matplotlib]
pytest.importorskip("mlx_lm")
pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[1]
ROWS = 2


GUARD = "qwen3guard-allow"  # the shipped Qwen3Guard spec, the toy's system prompt allowed


def _guard_spec(folder: Path) -> Path:
    """The shipped ``qwen3guard`` spec, allowing the default system prompt the
    toy's chat template inserts, without the pins of Qwen's published template."""
    text = (REPO / "guards" / "qwen3guard.toml").read_text(encoding="utf-8")
    text = text.split("[[chat_template_pins]]")[0]
    text = text.replace('conversation = "agent-step"',
                        'conversation = "agent-step"\ndefault_system_prompt = "allow"')
    path = folder / f"{GUARD}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _profile(path: Path, backend: str, options: str) -> Path:
    spec = _guard_spec(path.parent)
    path.write_text(
        f'name = "{path.stem}"\nbackend = "{backend}"\n[guard]\nname = "{spec}"\n'
        f'[checkpoint]\nlock = "{REPO / "locks/toy-guard.toml"}"\n[backend_options]\n{options}'
        '[decoding]\nmode = "greedy"\nmax_new_tokens = 64\n', encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from guardrepro.experiments.sweep import run_sweep

    tmp = tmp_path_factory.mktemp("unmeasured")
    ref = _profile(tmp / "ref-hf.toml", "hf", 'dtype = "float32"\ndevice = "cpu"\n')
    cand = _profile(tmp / "cand-mlx.toml", "mlx", "batch_size = 1\n")
    q = REPO / "quantize"
    spec = tmp / "sweep.toml"
    spec.write_text(
        f'[sweep]\nname = "unmeasured"\nsource_lock = "{REPO / "locks/toy-guard.toml"}"\n'
        f'cohort = "{REPO / "cohorts/toy-64.toml"}"\nlimit = {ROWS}\n'
        f'reference_profile = "{ref}"\nreference_name = "ref"\n'
        f'candidate_profile = "{cand}"\nreplicates = 100\n'
        f'[[recipe]]\nrecipe = "{q / "q8-g64.toml"}"\ncpu_recipe = "{q / "q8-g64-f32.toml"}"\n'
        f'[[recipe]]\nrecipe = "{q / "q4-g64.toml"}"\ncpu_recipe = "{q / "q4-g64-f32.toml"}"\n'
        '[[rule]]\nrule = "nuisance"\n', encoding="utf-8")
    out, home = tmp / "out", tmp / "home"
    said: list[str] = []
    result = run_sweep(spec, out, home=home, progress=False, say=said.append)
    return {"out": out, "home": home, "result": result, "tmp": tmp, "said": said}


def _expected_choice(out: Path) -> str:
    """Lowest mean KL, then highest top-1 agreement, then smallest artifact,
    read from each recipe's own files."""
    keys = []
    for run in (out / "runs").iterdir():
        if not (run / "divergence.json").exists():
            continue  # the rule baseline
        overall = json.loads((run / "divergence.json").read_text())["overall"]
        top1 = overall["top1_agreement"]
        size = json.loads((run / "artifact.json").read_text())["artifact_bytes"]
        keys.append((overall["mean_kl"], -top1["count"] / top1["denominator"], size, run.name))
    return min(keys)[3]


def test_every_row_fails_to_parse(sweep: dict[str, Any]) -> None:
    out = sweep["out"]
    for run in (out / "reference", out / "runs" / "q8-g64-f32", out / "runs" / "q4-g64-f32"):
        records = read_records(run)
        assert len(records) == ROWS
        assert {r.status for r in records} <= set(UNPARSED_STATUSES), run


def test_sweep_refuses_decisions_and_chooses_by_kl(sweep: dict[str, Any]) -> None:
    out = sweep["out"]
    warned = [line.split(":")[0] for line in sweep["said"] if "WARNING" in line]
    assert warned == ["ref", "q8-g64-f32", "q4-g64-f32"]  # not the rule, which parses
    rec = json.loads((out / "frontier.json").read_text())["recommendation"]
    assert rec["rule"] == "kl"
    assert rec["name"] == _expected_choice(out)
    assert "decisions not measurable (no valid reference decisions" in rec["reason"]
    report = (out / "report.md").read_text()
    assert f"`{rec['name']}`: rule kl: decisions not measurable" in report
    for paired in json.loads((out / "frontier.json").read_text())["paired_vs_reference"]:
        # 2 rows back no "better": a difference shown is "not enough rows"
        assert "better" not in paired["verdict"], paired


def test_attribute_calls_token_identical_rows_identical(sweep: dict[str, Any]) -> None:
    from guardrepro.checks.parity.attribute import attribute
    from guardrepro.checks.parity.loaders import load_reference, load_run_input

    out = sweep["out"]
    ref_records = {r.row_id: r for r in read_records(out / "reference")}
    ref, key_field, _ = load_reference(out / "reference")
    runs = [load_run_input(out / "runs" / name, key_field)
            for name in ("q8-g64-f32", "q4-g64-f32")]
    att = attribute(ref, key_field=key_field, quantized=runs, replicates=100)
    identical_somewhere = False
    for run, result in zip(runs, att.runs, strict=True):
        causes = {c.key: c.cause for c in result.rows if c.level == "strict"}
        assert set(causes) == set(ref_records)  # every row: invalid on both sides
        for key, record in run.records.items():
            same = record.output_token_ids == ref_records[key].output_token_ids
            identical_somewhere |= same
            assert (causes[key] == "identical") == same, (run.label, key)
    assert identical_somewhere  # the toy's q8 copy reproduces the fp32 tokens


def test_compare_leads_with_token_identity(sweep: dict[str, Any]) -> None:
    from guardrepro.checks.parity.compare import compare_runs, format_table

    out = sweep["out"]
    comparison = compare_runs(out / "reference", out / "runs" / "q8-g64-f32")
    summary = comparison.summary()
    assert summary.decisions_measurable is False
    assert summary.strict_agreement.count == 0
    lines = format_table(comparison).splitlines()
    figures = [line for line in lines if line.startswith(("identical", "valid", "exact",
                                                           "strict", "decisions"))]
    assert figures[0].startswith("identical tokens")
    assert figures[1].startswith(f"decisions not measurable: 0 of {ROWS} rows")


def test_run_warns_naming_the_parser(sweep: dict[str, Any], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from guardrepro.cli import cli

    out = sweep["out"]
    profile = _profile(tmp_path / "again.toml", "hf", 'dtype = "float32"\ndevice = "cpu"\n')
    result = CliRunner().invoke(cli, ["run", "--profile", str(profile), "--cohort",
                                      str(out / "cohort-rows.jsonl"), "--out",
                                      str(tmp_path / "run"), "--no-progress", "--home",
                                      str(sweep["home"])], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"WARNING: {ROWS} of {ROWS} rows were not parsed" in result.stderr
    assert f"guard {GUARD!r}'s parser (qwen3guard-parser-v2)" in result.stderr
    first = read_records(tmp_path / "run")[0]
    assert json.dumps(first.output_text[:160]) in result.stderr  # escaped: \n, not a newline
    assert "\\n" in result.stderr
