"""Attribution of disagreements on a hand-built case whose answer is known.

Seven original rows; the reference, an unquantized greedy run, a quantized
greedy run and five sampled repeats are written as run directories. Each row
is built so that one cause holds (worked out by hand in the comments), and the
expected counts per cause and level follow from the definitions in
``guardrepro.checks.parity.attribute``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from recordsets import write_run

from guardrepro.checks.parity.attribute import CAUSES, attribute
from guardrepro.checks.parity.loaders import load_reference, load_run_input
from guardrepro.cli import main
from guardrepro.errors import InputError

BASES = ["b1", "b2", "b3", "b4", "b5", "b6", "b7"]
# b1 sampling: repeats give 0 and 1, the reference (1) is among them
# b2 quantization: bf16 agrees with the reference, q8 moved away from bf16
# b3 backend: the repeats all say 0, never the reference's 1; bf16 says 0 too
# b4 unexplained: the repeats agree with the reference (0), greedy says 1
# b5 everyone agrees
# b6 exact only: 1.0 vs 0.5 (both unsafe); repeats give 0.5 and 1.0 -> sampling
# b7 bf16 parse error (fail-closed unsafe) vs reference 0; repeats say 0 -> unexplained
REF = [1, 1, 1, 0, 0, 1.0, 0]
BF16 = [0, 1, 0, 1, 0, 0.5, "parse"]
Q8 = [0, 0, 0, 1, 0, 0.5, 0]
SAMPLED = [[0, 1, 1, 0, 0, 1.0, 0], [1, 1, 1, 0, 0, 0.5, 0], [0, 1, 1, 0, 0, 0.5, 0],
           [1, 1, 1, 0, 0, 0.5, 0], [0, 1, 1, 0, 0, 0.5, 0]]
SAMPLED = [[s[0], s[1], 0, s[3], s[4], s[5], s[6]] for s in SAMPLED]  # b3: repeats all 0
Q8_MARGINS = {"b1:original": 0.3, "b2:original": 0.1, "b3:original": 2.0,
              "b4:original": 5.0}


def _write(path: Path, scores: list, margins: dict[str, float] | None = None) -> Path:
    specs = [(b, "original", "banking" if i % 2 else "slack", 0.0, s)
             for i, (b, s) in enumerate(zip(BASES, scores, strict=True))]
    return write_run(path, specs, margins=margins)


@pytest.fixture()
def runs(tmp_path: Path) -> dict[str, object]:
    return {
        "ref": _write(tmp_path / "ref", REF),
        "bf16": _write(tmp_path / "bf16", BF16),
        "q8": _write(tmp_path / "q8", Q8, Q8_MARGINS),
        "sampled": [_write(tmp_path / f"s{i}", s) for i, s in enumerate(SAMPLED, 1)],
    }


def _attribution(runs: dict) -> object:
    ref, key_field, info = load_reference(runs["ref"])
    return attribute(ref, key_field=key_field, reference_info=info,
                     bf16=load_run_input(runs["bf16"], key_field),
                     quantized=[load_run_input(runs["q8"], key_field)],
                     sampled=[load_run_input(s, key_field) for s in runs["sampled"]],
                     replicates=500, seed=1)


def causes_at(att: object, level: str) -> dict[str, dict[str, str]]:
    """run label -> key -> cause at ``level``, read from the attribution's rows."""
    return {r.label: {c.key: c.cause for c in r.rows if c.level == level}
            for r in att.runs}  # type: ignore[attr-defined]


def _counts(run: object, level: str) -> dict[str, tuple[int, int]]:
    c = run.counts[level]  # type: ignore[attr-defined]
    return {k: (c[k].count, c[k].denominator) for k in ("disagreements", *CAUSES)}


def test_each_row_gets_its_known_cause(runs: dict) -> None:
    att = _attribution(runs)
    causes = causes_at(att, "strict")
    assert causes["q8"] == {"b1:original": "sampling", "b2:original": "quantization",
                            "b3:original": "backend", "b4:original": "unexplained"}
    assert causes["bf16"] == {"b1:original": "sampling", "b3:original": "backend",
                              "b4:original": "unexplained", "b7:original": "unexplained"}
    exact = causes_at(att, "exact")
    assert exact["q8"] == {"b1:original": "sampling", "b2:original": "quantization",
                           "b3:original": "backend", "b4:original": "unexplained",
                           "b6:original": "sampling"}
    assert exact["bf16"]["b6:original"] == "sampling" and "b7:original" not in exact["bf16"]


def test_counts_and_denominators(runs: dict) -> None:
    att = _attribution(runs)
    bf16, q8 = att.runs
    assert (bf16.label, bf16.role, q8.label, q8.role) == ("bf16", "unquantized", "q8",
                                                          "quantized")
    assert _counts(q8, "strict") == {"disagreements": (4, 7), "identical": (0, 7),
                                     "sampling": (1, 7),
                                     "quantization": (1, 7), "backend": (1, 7),
                                     "unexplained": (1, 7)}
    assert _counts(bf16, "strict") == {"disagreements": (4, 7), "identical": (0, 7),
                                       "sampling": (1, 7),
                                       "quantization": (0, 7), "backend": (1, 7),
                                       "unexplained": (2, 7)}
    # exact level: jointly valid rows only (b7's parse error leaves 6 for bf16)
    assert _counts(bf16, "exact") == {"disagreements": (4, 6), "identical": (0, 6),
                                      "sampling": (2, 6),
                                      "quantization": (0, 6), "backend": (1, 6),
                                      "unexplained": (1, 6)}
    assert _counts(q8, "exact")["sampling"] == (2, 7)
    for level in ("strict", "exact"):
        for cause in CAUSES:
            c = q8.counts[level][cause]
            if c.count:
                assert 0.0 <= c.lower <= c.point <= c.upper <= 1.0


def test_noise_floor_and_margins(runs: dict) -> None:
    att = _attribution(runs)
    nf = att.noise_floor
    # strict: only b1's repeats disagree; exact: b1 and b6
    assert (nf["strict"].count, nf["strict"].denominator) == (1, 7)
    assert (nf["exact"].count, nf["exact"].denominator) == (2, 7)
    q8 = att.runs[1]
    assert q8.margins["strict"]["quantization"]["q50"] == pytest.approx(0.1)
    assert q8.margins["strict"]["unexplained"]["q50"] == pytest.approx(5.0)
    row = next(r for r in q8.rows if r.key == "b1:original" and r.level == "strict")
    assert (row.reference, row.local, row.bf16) == ("1", "0", "0")
    assert row.sampled == ["0", "1", "0", "1", "0"]


def test_unparsed_rows_with_the_references_tokens_are_identical(
        runs: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """b7 fails to parse in the reference and in the run, with the same output:
    the gate's rule counts it as a disagreement (invalid on both sides), and the
    attribution calls it identical, not unexplained; b4 moved (different text)."""
    ref_run = _write(tmp_path / "ref-parse", [*REF[:6], "parse"])
    run = _write(tmp_path / "run-parse", [*REF[:3], 1, *REF[4:6], "parse"])
    ref, key_field, _ = load_reference(ref_run)
    att = attribute(ref, key_field=key_field, quantized=[load_run_input(run, key_field)],
                    replicates=200)
    causes = causes_at(att, "strict")["run-parse"]
    assert causes == {"b4:original": "unexplained", "b7:original": "identical"}
    row = next(r for r in att.runs[0].rows if r.key == "b7:original")
    assert (row.reason, row.reference, row.local) == ("local_invalid", "1", "1")
    assert main(["attribute", "--reference", str(ref_run), "--quantized", str(run),
                 "--replicates", "100"]) == 0
    assert "b7:original  strict identical (local_invalid)" in capsys.readouterr().out


def test_missing_rows_are_listed(runs: dict, tmp_path: Path) -> None:
    short = _write(tmp_path / "short", [*Q8[:6], None])
    ref, key_field, _ = load_reference(runs["ref"])
    att = attribute(ref, key_field=key_field, quantized=[load_run_input(short, key_field)],
                    replicates=200)
    assert att.runs[0].missing == ["b7:original"]
    assert att.runs[0].compared == 6
    # without bf16 or sampled runs nothing can be explained
    assert {r.cause for r in att.runs[0].rows} == {"unexplained"}


def test_needs_a_greedy_run(runs: dict) -> None:
    ref, key_field, _ = load_reference(runs["ref"])
    with pytest.raises(InputError, match="at least one greedy run"):
        attribute(ref, key_field=key_field)


def test_cli(runs: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "att.json"
    args = ["attribute", "--reference", str(runs["ref"]), "--bf16", str(runs["bf16"]),
            "--quantized", str(runs["q8"]), "--replicates", "200", "--out", str(out)]
    for s in runs["sampled"]:
        args += ["--sampled", str(s)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "sampling-noise floor (5 sampled repeats): strict 1/7" in text
    assert "b2:original  strict quantization" in text
    assert out.is_file()


def test_released_style_reference_keys_by_base(runs: dict) -> None:
    """A released reference is keyed by base sample id over the original rows."""
    from guardrepro.checks.parity.attribute import RefValue, RunInput
    from guardrepro.rundir.records import read_records

    ref = {b: RefValue(b, float(s), b) for b, s in zip(BASES, REF, strict=True)}
    q8 = RunInput.from_records("q8", read_records(runs["q8"] / "records.jsonl"),
                               "base_sample_id")
    bf16 = RunInput.from_records("bf16", read_records(runs["bf16"] / "records.jsonl"),
                                 "base_sample_id")
    assert set(q8.records) == set(BASES)
    att = attribute(ref, key_field="base_sample_id", bf16=bf16, quantized=[q8],
                    replicates=200)
    # no sampled runs: b1 (bf16 differs from the reference) becomes backend
    assert causes_at(att, "strict")["q8"] == {"b1": "backend", "b2": "quantization",
                                                 "b3": "backend", "b4": "backend"}
