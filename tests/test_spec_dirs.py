"""Bare spec names: ``--profile toy-hf`` finds ``runners/toy-hf.toml``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from guardrepro.cli import cli
from guardrepro.errors import InputError
from guardrepro.spec_dirs import spec_path, spec_root

ROOT = Path(__file__).resolve().parents[1]


def test_bare_names_find_the_checkout_specs(tmp_path: Path, monkeypatch) -> None:
    assert spec_root() == ROOT
    assert spec_path("toy-hf", "runners") == ROOT / "runners" / "toy-hf.toml"
    assert spec_path("toy", "quantize/sweeps") == ROOT / "quantize" / "sweeps" / "toy.toml"
    assert spec_path("flips", "notebooks") == ROOT / "notebooks" / "flips.py"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "toy-hf").write_text("mine")  # an existing path wins over a name
    assert spec_path("toy-hf", "runners") == Path("toy-hf")
    with pytest.raises(InputError, match="toy-hf-sampled"):  # lists what exists
        spec_path("no-such-profile", "runners")
    assert spec_path("missing.toml", "runners") == Path("missing.toml")


def test_cohort_build_by_bare_name(tmp_path: Path) -> None:
    out = tmp_path / "toy.jsonl"
    result = CliRunner().invoke(cli, ["cohort", "build", "toy-64", "--out", str(out),
                                      "--data-dir", str(ROOT / "guardrepro/data/toy_bench")])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.open()]
    assert len(rows) == 256  # 64 bases x 4 variants (cohorts/toy-64.toml)
