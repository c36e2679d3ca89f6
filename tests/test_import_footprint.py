"""What a verb imports: a local ``run`` loads no Ray module (the engine is
chosen in ``run/engine.py`` and ``engine_ray`` is imported only for
``--engine ray``), and ``stats`` loads no guard adapter (it reads records;
a guard's parser is all it may need, to check a record's score).

Each verb runs in a fresh interpreter (``guardrepro.cli.main``), which then
prints the names in ``sys.modules``; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
from guardrepro.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

RAY_MODULES = {"guardrepro.run.engine_ray", "guardrepro.run.ray_pool", "guardrepro.run.ray_actor"}


def _modules(*args: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, done.stderr
    return set(result["modules"])


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from guardrepro.bench.cohort.build import build_cohort_file

    path = tmp_path_factory.mktemp("footprint") / "cohort.jsonl"
    build_cohort_file(ROOT / "cohorts/toy-64.toml", ROOT / "guardrepro/data/toy_bench", path)
    return path


def test_a_local_run_imports_no_ray_module(cohort: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    loaded = _modules("run", "--profile", "rule-nuisance", "--cohort", str(cohort),
                      "--out", str(out), "--limit", "3", "--no-progress")
    assert (out / "records.jsonl").read_text(encoding="utf-8").count("\n") == 3  # it ran
    assert "guardrepro.run.engine" in loaded and "guardrepro.run.workers" in loaded
    assert not loaded & RAY_MODULES
    assert not {name for name in loaded if name == "ray" or name.startswith("ray.")}


ADAPTERS = ("guardrepro.guards.adapter", "guardrepro.guards.conversation",
            "guardrepro.guards.llama_guard", "guardrepro.guards.qwen3guard",
            "guardrepro.guards.shieldgemma")


def test_stats_imports_no_guard_adapter(cohort: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    _modules("run", "--profile", "rule-nuisance", "--cohort", str(cohort), "--out", str(out),
             "--limit", "8", "--no-progress")
    loaded = _modules("stats", str(out), "--replicates", "20", "--out", str(tmp_path / "st"))
    assert (tmp_path / "st" / "stats.json").is_file()  # it ran
    assert "guardrepro.checks.stats.compute" in loaded
    assert not [m for m in loaded if m.startswith(ADAPTERS)]
