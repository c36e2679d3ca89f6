"""Fault suite, specs: a sweep's ``limit`` is >= 1 or absent (``limit = 0``
used to mean "no limit"); a recipe's name follows the lock-name rule like every
other name; a refused sweep leaves no ``--out`` it made; a gate spec's
``package:`` path that leaves the package names the spec file and the field.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_hf_cache import write_lock

from guardrepro.cli import main

pytestmark = [pytest.mark.faults]
ROOT = Path(__file__).resolve().parents[1]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def sweep_spec(path: Path, *, source_lock: Path | None = None, extra: str = "") -> Path:
    path.write_text(
        f'[sweep]\nname = "t"\nsource_lock = "{source_lock or ROOT / "locks/toy-guard.toml"}"\n'
        f'cohort = "{ROOT / "cohorts/toy-64.toml"}"\n'
        f'reference_profile = "{ROOT / "runners/toy-hf.toml"}"\n'
        f'candidate_profile = "{ROOT / "runners/toy-mlx-q8.toml"}"\n{extra}\n'
        f'[[recipe]]\nrecipe = "{ROOT / "quantize/q8-g64-f32.toml"}"\n', encoding="utf-8")
    return path


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_sweep_limit_below_one_is_refused(tmp_path, capsys, limit):
    spec = sweep_spec(tmp_path / "s.toml", extra=f"limit = {limit}")
    out = tmp_path / "out"
    code, text = cli(capsys, "sweep", str(spec), "--out", str(out), "--no-progress")
    assert code == 2 and str(spec) in text and "'sweep.limit'" in text and ">= 1" in text
    assert not out.exists()


def test_recipe_name_follows_the_name_rule(tmp_path, capsys):
    recipe = tmp_path / "r.toml"
    text = (ROOT / "quantize/q8-g64-f32.toml").read_text(encoding="utf-8")
    recipe.write_text(text.replace('name = "q8-g64-f32"', 'name = "../escape"'),
                      encoding="utf-8")
    out = tmp_path / "q8"
    code, printed = cli(capsys, "quantize", "--recipe", str(recipe), "--model",
                        str(ROOT / "locks/toy-guard.toml"), "--out", str(out))
    assert code == 2 and str(recipe) in printed and "'recipe.name'" in printed
    assert "'../escape'" in printed and not out.exists()


def test_refused_sweep_leaves_no_out(tmp_path, capsys, monkeypatch):
    """The source lock is a hub checkpoint absent from an offline HF cache: the
    sweep is refused after it made --out. Before: new/out was left behind."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "home"))
    spec = sweep_spec(tmp_path / "s.toml", source_lock=write_lock(tmp_path / "hub.toml"))
    out = tmp_path / "new" / "out"
    code, text = cli(capsys, "sweep", str(spec), "--out", str(out), "--no-progress")
    assert code == 2 and "HF_HUB_OFFLINE" in text
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "mine"  # a directory that existed before is never removed
    kept.mkdir()
    (kept / "notes.txt").write_text("x")
    code, _ = cli(capsys, "sweep", str(spec), "--out", str(kept), "--no-progress")
    assert code == 2 and (kept / "notes.txt").read_text() == "x"


@pytest.mark.parametrize(("field", "line"), [
    ("reference.path", 'type = "records"\npath = "package:../.."'),
    ("reference.lock", 'type = "released"\nlock = "package:../../locks/x.toml"\n'
                       'benchmark = "agentdojo"'),
])
def test_gate_spec_package_path_names_spec_and_field(tmp_path, capsys, field, line):
    text = (ROOT / "checks/toy-guard.toml").read_text(encoding="utf-8")
    spec = tmp_path / "g.toml"
    spec.write_text(text.replace('type = "records"\npath = "package:data/toy_reference/'
                                 'records.jsonl"', line), encoding="utf-8")
    code, printed = cli(capsys, "gate", str(ROOT / "guardrepro/data/toy_reference"),
                        "--spec", str(spec))
    assert code == 2 and "Traceback" not in printed
    assert f"{spec}, field '{field}'" in printed and "'..'" in printed
