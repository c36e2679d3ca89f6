"""Fault suite, quantize on a full disk: mlx's writer fails with a RuntimeError
that names no file ("[write] Unable to write N bytes to file."); ``quantize``
must exit 2 naming its ``--out`` and saying the disk is full, with no traceback
and no staging directory left. The disk is real: a 1 MiB tmpfs with ``leave``
bytes free (``test_faults_env.full_disk``), too little for the toy guard's
converted weights, while the staged source is hardlinked from the cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_faults_env import full_disk

from guardrepro.cli import main

pytestmark = [pytest.mark.faults]
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("leave", [20_000, 500_000])
def test_full_disk_quantize_names_the_artifact(tmp_path, capsys, monkeypatch, leave):
    pytest.importorskip("mlx_lm")
    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "home"))
    assert main(["fetch", str(ROOT / "locks/toy-guard.toml"), "--no-progress"]) == 0
    with full_disk(tmp_path / "full", leave=leave) as disk:
        capsys.readouterr()
        code = main(["quantize", "--recipe", str(ROOT / "quantize/q8-g64-f32.toml"),
                     "--model", str(ROOT / "locks/toy-guard.toml"), "--out", str(disk / "q8")])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and "RuntimeError" not in err
        assert f"cannot write {disk / 'q8'}: no space left on the device" in err
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
