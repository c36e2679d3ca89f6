"""Fixtures shared by the test modules, the test tiers and the order of the tests.

A loopback HTTP server per test; the opt-in ``slow`` and ``faults`` tiers; one
local Ray for the modules that use ``cluster`` (run one after another); the
session's ``guardrepro demo``, started in a process of its own when collection
ends, its tests run last (``_order``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer

ROOT = Path(__file__).resolve().parents[1]


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


# ------------------------------------------------------------ shared Ray
# One local Ray serves every module that asks for ``cluster``: collection puts
# those modules one after another (``_order``), and the Ray started for the
# first is shut down after the last (``_SharedRay``), not once per module.
@pytest.fixture(scope="session")
def faults() -> Iterator[Path]:
    """The folder of Ray fault markers (tests/ray_faults.py) of the session's
    Ray; a test removes the markers it writes before it ends."""
    folder = Path(tempfile.mkdtemp(prefix="gr-faults-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


class _SharedRay:
    """The local Ray of 2 CPUs (``ray_faults.local_ray``), kept from the first
    module that uses it to the last of those that run one after another."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None
        self._ray: Any = None
        self.next_item_uses_it = False

    def start(self, faults: Path) -> Any:
        if self._stack is None:
            from ray_faults import local_ray

            stack = contextlib.ExitStack()
            self._ray = stack.enter_context(local_ray(faults, ROOT))
            self._stack = stack
        return self._ray

    def stop(self) -> None:
        stack, self._stack, self._ray = self._stack, None, None
        if stack is not None:
            stack.close()


SHARED_RAY = pytest.StashKey[_SharedRay]()


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, faults: Path) -> Iterator[Any]:
    """A local Ray of 2 CPUs, its faults installed in the workers; shut down at
    the module's end unless the next test (of the next module) uses it too."""
    shared = request.config.stash.get(SHARED_RAY, None)
    if shared is None:
        shared = request.config.stash[SHARED_RAY] = _SharedRay()
    yield shared.start(faults)
    if not shared.next_item_uses_it:
        shared.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Before the fixtures' teardown: tell ``cluster`` whether the next test needs it."""
    shared = item.config.stash.get(SHARED_RAY, None)
    if shared is not None:
        shared.next_item_uses_it = nextitem is not None and _uses(nextitem, "cluster")


# ------------------------------------------------------------ the demo
# ``guardrepro demo`` takes about a minute, most of it MLX on one core. When a
# selected test uses the ``demo`` fixture, the demo starts in a process of its
# own as soon as collection ends and runs beside the other tests; the tests that
# use it run last (``_order``), and the fixture waits for the demo to finish.
DEMO_ARGS = ("--no-progress", "--replicates", "500")
DEMO_TIMEOUT_S = 1800


class _DemoJob:
    """``guardrepro demo`` into ``<root>/out``, its cache home ``<root>/home``,
    in a child process; stdout and stderr kept in files beside them."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="gr-demo-"))
        env = {**os.environ, "GUARDREPRO_HOME": str(self.root / "home"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                            os.environ.get("PYTHONPATH")]))}
        with open(self.root / "stdout", "wb") as out, open(self.root / "stderr", "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "guardrepro", "demo", "--out", str(self.root / "out"),
                 *DEMO_ARGS], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def result(self) -> tuple[Path, str]:
        try:
            code = self.proc.wait(timeout=DEMO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.close()
            pytest.fail(f"guardrepro demo still running after {DEMO_TIMEOUT_S} s")
        stdout = (self.root / "stdout").read_text(encoding="utf-8")
        stderr = (self.root / "stderr").read_text(encoding="utf-8", errors="replace")
        assert code == 0, (code, stdout[-3000:], stderr[-3000:])
        return self.root / "out", stdout

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


DEMO_JOB = pytest.StashKey[_DemoJob]()


@pytest.fixture(scope="session")
def demo(request: pytest.FixtureRequest) -> tuple[Path, str]:
    """``guardrepro demo --replicates 500`` run once for the session: its
    directory and stdout. tests/test_demo.py checks it; the README example of
    tests/test_docs.py resumes its transformers run instead of generating the
    same 256 rows again (slow tier)."""
    job = request.config.stash.get(DEMO_JOB, None)  # started when collection ended
    if job is None:
        job = request.config.stash[DEMO_JOB] = _DemoJob()
    return job.result()


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
    quantize(recipe, ROOT / "guardrepro" / "data" / "toy_guard", base / "f32", unpinned=True)
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
    for lock in ("locks/toy-guard.toml", "locks/toy-bench.toml"):
        fetch_lock(ROOT / lock, home, progress=False)
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
    items[:] = _order(items)


def _uses(item: pytest.Item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


def _order(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` in their order but for two moves, each keeping the order of what
    it moves: the modules with a test using ``cluster`` run after the others, one
    after another, so one Ray serves them all; then the tests using ``demo``. The
    demo, started when collection ends, uses one core: it runs beside the tests
    that use one too (most of the rest), not beside Ray's two actors at a time."""
    ray_modules = {item.nodeid.split("::")[0] for item in items if _uses(item, "cluster")}
    ray = [item for item in items if item.nodeid.split("::")[0] in ray_modules]
    demo = [item for item in items if _uses(item, "demo") and item not in ray]
    moved = {id(item) for item in ray + demo}
    return [item for item in items if id(item) not in moved] + ray + demo


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the demo if a test that will run uses it (the ``demo`` fixture)."""
    if session.config.option.collectonly:
        return
    if any(_uses(item, "demo") and item.get_closest_marker("skip") is None
           for item in session.items):
        session.config.stash[DEMO_JOB] = _DemoJob()


def pytest_sessionfinish(session: pytest.Session) -> None:
    job = session.config.stash.get(DEMO_JOB, None)
    if job is not None:
        job.close()
    shared = session.config.stash.get(SHARED_RAY, None)
    if shared is not None:
        shared.stop()
