"""Faults for the Ray engine tests, installed in every Ray worker process by
``worker_process_setup_hook`` (tests/test_engine_ray.py); never in the test
process itself.

``install`` reads the directory named by ``GUARDREPRO_TEST_RAY_FAULTS`` and
wraps ``attempts._safe_generate`` (the runner call of every chunk):

- ``raise-<row_id>`` exists: a chunk holding that row raises ``RuntimeError``
  (an application error inside a unit); ``raise-<backend>-<row_id>``: the
  same, only in a runner of that backend (one run of a sweep);
- ``hold-<row_id>`` exists: the worker writes its pid to ``pid-<row_id>`` and
  waits while the file exists (the test kills it there, then removes it);
- ``transformers-version`` exists: ``importlib.metadata.version`` reports its
  text for ``transformers`` (a node on another transformers version).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENV = "GUARDREPRO_TEST_RAY_FAULTS"
HOLD_LIMIT_S = 120.0


@contextlib.contextmanager
def local_ray(faults: Path, root: Path) -> Iterator[Any]:
    """A local Ray of 2 CPUs in its own temp dir, shut down (and the dir removed)
    at the end; the faults of ``faults`` installed in its worker processes only,
    which import this checkout (``root``) and these test helpers."""
    import ray

    temp = Path(tempfile.mkdtemp(prefix="gr-ray-"))
    path = os.pathsep.join([str(root), str(root / "tests")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="WARNING", object_store_memory=128 * 1024**2, _temp_dir=str(temp),
             runtime_env={"env_vars": {ENV: str(faults), "PYTHONPATH": path},
                          "worker_process_setup_hook": "ray_faults.install"})
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def install() -> None:
    where = os.environ.get(ENV)
    if not where:
        return
    folder = Path(where)
    from guardrepro.run import attempts

    real = attempts._safe_generate

    def faulty(runner: Any, requests: list[Any], params: Any) -> Any:
        for request in requests:
            if ((folder / f"raise-{request.row_id}").exists()
                    or (folder / f"raise-{runner.backend}-{request.row_id}").exists()):
                raise RuntimeError(f"injected failure at {request.row_id}")
            hold = folder / f"hold-{request.row_id}"
            if hold.exists():
                pid = folder / f"pid-{request.row_id}"
                pid.with_suffix(".tmp").write_text(str(os.getpid()))
                pid.with_suffix(".tmp").replace(pid)
                deadline = time.monotonic() + HOLD_LIMIT_S
                while hold.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
        return real(runner, requests, params)

    attempts._safe_generate = faulty
    version_file = folder / "transformers-version"
    real_version = importlib.metadata.version

    def version(distribution_name: str) -> str:
        if distribution_name == "transformers" and version_file.exists():
            return version_file.read_text().strip()
        return real_version(distribution_name)

    importlib.metadata.version = version
