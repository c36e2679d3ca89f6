"""Fixtures shared by the test modules: a loopback HTTP server per test."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as srv:
        yield srv


# ---------------------------------------------------------------- test tiers
# ``slow`` and ``faults`` are opt-in: a test so marked is skipped (with the
# reason) unless its tier is asked for, by ``--run-slow`` / ``--run-faults``,
# ``--all-tiers`` (scripts/test.sh, hence .ci/run) or a ``-m`` expression
# naming the tier (``-m faults``).
TIERS = ("slow", "faults")


@pytest.fixture(scope="module")
def faults() -> Iterator[Path]:
    """A folder of Ray fault markers for one test module (tests/ray_faults.py)."""
    folder = Path(tempfile.mkdtemp(prefix="gr-faults-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(faults: Path) -> Iterator[Any]:
    """A local Ray of 2 CPUs for one test module, its faults installed in the
    workers (``ray_faults.local_ray``), shut down at the module's end."""
    from ray_faults import local_ray

    with local_ray(faults, Path(__file__).resolve().parents[1]) as ray_module:
        yield ray_module


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``guardrepro demo --replicates 500`` run once for the session: its
    directory and stdout. tests/test_demo.py checks it; the README example of
    tests/test_docs.py resumes its transformers run instead of generating the
    same 256 rows again (slow tier)."""
    from click.testing import CliRunner

    from guardrepro.cli import cli

    root = tmp_path_factory.mktemp("demo")
    env = {"GUARDREPRO_HOME": str(root / "home")}
    result = CliRunner().invoke(
        cli, ["demo", "--out", str(root / "out"), "--no-progress", "--replicates", "500"], env=env
    )
    assert result.exit_code == 0, result.output
    return root / "out", result.stdout


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """torch on one intra-op thread for one test module, restored after it. For
    tiny models (hidden sizes of 32 to 64) a step is framework overhead, and a
    second thread only adds synchronisation, and on a loaded 2-core machine its
    waits dominate (measured at load 6: the lean decoder and ``generate`` 5 to
    75 times slower on two threads than on one). Results do not depend on it:
    each comparison runs both of its sides under the same setting."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def toy_mlx_f32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped toy guard as a float32 MLX artifact (its bfloat16 weights cast
    exactly), written once per session for the MLX test modules."""
    from guardrepro.artifacts.quantize.convert import quantize

    base = tmp_path_factory.mktemp("toy-mlx-f32")
    recipe = base / "f32.toml"
    recipe.write_text('[recipe]\nname = "f32"\nquantize = false\ndtype = "float32"\n'
                      'source_dtype = "bfloat16"\n', encoding="utf-8")
    root = Path(__file__).resolve().parents[1]
    quantize(recipe, root / "guardrepro" / "data" / "toy_guard", base / "f32", unpinned=True)
    return base / "f32"


@pytest.fixture(scope="session", autouse=True)
def guardrepro_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test runs with a guardrepro home of the session's own, never the
    user's cache (``~/.cache/guardrepro``): ``GUARDREPRO_HOME`` is set for the
    session (subprocesses inherit it), with the two locks that ship in the
    package, the toy guard and the toy benchmark, fetched into it, so that no
    test depends on what another test, or the user, fetched before. A test that
    needs another home sets its own."""
    from guardrepro.artifacts.fetch import fetch_lock

    home = tmp_path_factory.mktemp("guardrepro-home")
    root = Path(__file__).resolve().parents[1]
    for lock in ("locks/toy-guard.toml", "locks/toy-bench.toml"):
        fetch_lock(root / lock, home, progress=False)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GUARDREPRO_HOME", str(home))
        yield home


def pytest_addoption(parser: pytest.Parser) -> None:
    for tier in TIERS:
        parser.addoption(f"--run-{tier}", action="store_true", help=f"run the {tier} tier")
    parser.addoption("--all-tiers", action="store_true", help="run every tier")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = str(config.getoption("markexpr") or "")
    for tier in TIERS:
        if (config.getoption("all_tiers") or config.getoption(f"run_{tier}")
                or tier in wanted):
            continue
        skip = pytest.mark.skip(reason=f"{tier} tier: pass --run-{tier} or --all-tiers "
                                f"(scripts/test.sh runs every tier)")
        for item in items:
            if item.get_closest_marker(tier) is not None:
                item.add_marker(skip)
