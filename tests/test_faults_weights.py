"""Fault suite, weights and leftovers: a checkpoint with pickled weights only, a
source directory carrying Python files, a killed conversion's staging directory.

Everything goes through ``guardrepro run`` / ``guardrepro quantize`` (the CLI).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runner_helpers import write_cohort

from guardrepro.cli import main

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "guardrepro/data/toy_guard"


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def bin_only(tmp_path: Path) -> Path:
    """The toy checkpoint with its weights as pytorch_model.bin instead of safetensors
    (the bytes are never read: the refusal comes first)."""
    directory = tmp_path / "bin-only"
    directory.mkdir()
    for name in ("config.json", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json", "template.txt"):  # fmt: skip
        shutil.copyfile(TOY / name, directory / name)
    (directory / "pytorch_model.bin").write_bytes(b"PK\x03\x04 pickled weights stand-in")
    return directory


def profile(path: Path, backend: str, checkpoint: Path) -> Path:
    options = 'dtype = "float32"\n' if backend in ("vllm", "hf") else ""
    path.write_text(
        f'name = "t"\nbackend = "{backend}"\n\n[guard]\nname = "toy-guard"\n'
        f'template_path = "{checkpoint / "template.txt"}"\n\n[checkpoint]\n'
        f'dir = "{checkpoint}"\n\n[backend_options]\n{options}\n[decoding]\n'
        'mode = "greedy"\nmax_new_tokens = 8\n'
    )
    return path


@pytest.mark.parametrize("backend", ["vllm", "mlx", "hf"])
def test_runner_refuses_a_checkpoint_without_safetensors(bin_only, tmp_path, capsys, backend):
    pytest.importorskip("torch")  # prompt rendering needs the tokenizer stack
    cohort = write_cohort(tmp_path / "cohort.jsonl", 2)
    prof = profile(tmp_path / f"{backend}.toml", backend, bin_only)
    code, _, err = cli(
        capsys, "run", "--profile", str(prof), "--cohort", str(cohort),
        "--out", str(tmp_path / "run"), "--no-progress",
    )  # fmt: skip
    assert code == 2, err
    assert "Traceback" not in err
    assert str(bin_only) in err and "safetensors" in err
    assert not (tmp_path / "run").exists()  # refused before any row: nothing left behind


def _source_with_code(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    shutil.copytree(TOY, source)
    (source / "modeling_evil.py").write_text("raise SystemExit('upstream code ran')\n")
    (source / "notes.md").write_text("not an artifact file\n")
    return source


def test_quantize_unpinned_copies_only_artifact_files(tmp_path, capsys):
    pytest.importorskip("mlx_lm")
    source = _source_with_code(tmp_path)
    out = tmp_path / "q8"
    code, _, err = cli(
        capsys, "quantize", "--recipe", str(ROOT / "quantize/q8-g64-f32.toml"),
        "--model", str(source), "--out", str(out), "--unpinned",
    )  # fmt: skip
    assert code == 0, err
    names = sorted(p.name for p in out.iterdir())
    assert not [n for n in names if n.endswith(".py")], names
    assert "notes.md" not in names and "TRAINING.md" not in names
    assert "model.safetensors" in names and "config.json" in names


def test_killed_quantize_leaves_staging_that_the_next_run_removes(tmp_path):
    pytest.importorskip("mlx_lm")
    source = _source_with_code(tmp_path)
    parent = tmp_path / "out"
    parent.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    args = [sys.executable, "-m", "guardrepro", "quantize", "--recipe",
            str(ROOT / "quantize/q8-g64-f32.toml"), "--model", str(source), "--unpinned"]
    proc = subprocess.Popen([*args, "--out", str(parent / "a")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    staged: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        staged = [p for p in parent.iterdir() if ".staging-" in p.name]
        if staged and any((p / "source").is_dir() for p in staged):
            break
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.skip("the conversion finished before it could be killed mid-way")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    leftovers = [p for p in parent.iterdir() if ".staging-" in p.name]
    assert leftovers, "a killed conversion leaves its staging directory"
    assert all(f"-{proc.pid}-" in p.name for p in leftovers)
    done = subprocess.run([*args, "--out", str(parent / "b")], env=env, capture_output=True,
                          text=True, check=False, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not [p for p in parent.iterdir() if ".staging-" in p.name]
    assert "left by an interrupted conversion" in done.stderr + done.stdout
