"""The wheel: it ships exactly the checkout's spec folders, and a fresh venv runs the demo.

The wheel is built (``pip wheel --no-build-isolation``) from a copy of the files git
would commit, so build leftovers never land in the worktree. The install test makes
a fresh venv outside the checkout whose only link to the test environment is a
``.pth`` line naming its site-packages (so torch and transformers are not installed
again, ~16 s and 1 GB); that line does not run the checkout's editable-install hook,
and the test asserts that ``guardrepro`` imports from the venv's own site-packages.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC_FOLDERS = ("locks", "runners", "cohorts", "checks", "quantize", "notebooks", "guards")


def _git_files(*paths: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                          "--", *paths], cwd=ROOT, capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to know which files a build sees")
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    for rel in _git_files():
        target = src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                           "--no-build-isolation", "-v", "-w", str(base / "dist")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (base / "build.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    (found,) = (base / "dist").glob("guardrepro-*.whl")
    return found


def test_the_build_warns_about_none_of_the_projects_own_packages(wheel: Path) -> None:
    """The toy data and the report template ship as declared data packages:
    setuptools has nothing to say about them (a newcomer reads its warning as
    the toy guard being dropped)."""
    log = (wheel.parent.parent / "build.log").read_text(encoding="utf-8")
    assert "adding 'guardrepro/data/toy_guard/model.safetensors'" in log  # the log is verbose
    assert "absent from the `packages` configuration" not in log
    assert "guardrepro" not in "".join(line for line in log.splitlines()
                                       if "SetuptoolsDeprecationWarning" in line)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_wheel_ships_exactly_the_spec_folders(wheel: Path) -> None:
    expected = {rel: _digest((ROOT / rel).read_bytes()) for rel in _git_files(*SPEC_FOLDERS)}
    with zipfile.ZipFile(wheel) as archive:
        prefix = "guardrepro/specs/"
        shipped = {name[len(prefix):]: _digest(archive.read(name))
                   for name in archive.namelist() if name.startswith(prefix)}
        assert "guardrepro/data/toy_guard/model.safetensors" in archive.namelist()
    assert shipped == expected


@pytest.mark.slow
def test_fresh_venv_runs_the_demo_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    env_dir = tmp_path / "venv"
    # no pip (nor the setuptools 3.11's ensurepip would pin) of its own: the pip of the
    # test environment, seen through the .pth line, installs into this venv's prefix
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                           "'purelib'))"], capture_output=True, text=True, check=True)
    Path(site.stdout.strip(), "test-env.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(GUARDREPRO_HOME=str(tmp_path / "home"), PATH=f"{env_dir / 'bin'}:{env['PATH']}")
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "-q",
                              f"{wheel}[hf]"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    where = subprocess.run([str(python), "-c", "import guardrepro; print(guardrepro.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert Path(where.stdout.strip()).is_relative_to(env_dir), where.stdout
    demo = subprocess.run([str(env_dir / "bin" / "guardrepro"), "demo", "--no-mlx",
                           "--no-progress", "--replicates", "200", "--out", "demo"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert demo.returncode == 0, (demo.stdout[-2000:], demo.stderr[-3000:])
    assert "gate: PASS" in demo.stdout
    assert (tmp_path / "demo" / "hf-fp32" / "report.html").is_file()
    # a bare spec name resolves to the shipped copy
    named = subprocess.run([str(env_dir / "bin" / "guardrepro"), "verify", "toy-guard"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert named.returncode == 0, named.stderr
    assert "of lock 'toy-guard' verified" in named.stdout
    # the guard specs ship too: every guard is listed from the installed package
    listed = subprocess.run([str(env_dir / "bin" / "guardrepro"), "guards", "--json"],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["ts-guard"]["origin"] == "shipped"
    assert "/guardrepro/specs/guards/ts-guard.toml" in rows["ts-guard"]["spec"]
