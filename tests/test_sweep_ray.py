"""``sweep --engine ray`` on the local two-CPU Ray of the ``cluster`` fixture (tests/conftest.py).

Expectations come from the local sweep (``run_sweep`` without Ray: every
configuration through ``pipeline.run_cohort`` in this process) on the same
spec, compared on every record field but the timings and on the sweep's
tables and JSON minus the fields measured in seconds or bytes of memory.
Builds and teacher passes are counted by wrapping the real functions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="needs Ray: pip install 'guardrepro[ray]'")
pytest.importorskip("mlx_lm")


from guardrepro.errors import InferenceError  # noqa: E402
from guardrepro.run.engine_ray import RayOptions  # noqa: E402
from guardrepro.run.ray_pool import TIMING_FIELDS  # noqa: E402
from guardrepro.rundir.records import read_records  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
ROWS = 4
CONFIGS = ("reference", "runs/q8-g64-f32", "runs/rule-nuisance")
# summary/frontier fields measured in seconds or memory (differ run to run)
MEASURED = {"rows_per_s", "decode_tok_per_s", "prefill_tok_per_s", "peak_memory_bytes",
            "seconds", "elapsed_s", "generation_started", "generation_finished", "run_dir"}



def _spec(tmp: Path) -> Path:
    """One recipe (the CPU Q8 one), one rule, ROWS rows; the reference with one hf
    thread (a local sweep's "auto" would be the cores, a Ray actor's its 1 CPU)."""
    reference = tmp / "toy-hf-1.toml"
    text = (ROOT / "runners/toy-hf.toml").read_text(encoding="utf-8")
    text = text.replace('"../locks/', f'"{ROOT}/locks/').replace('threads = "auto"',
                                                                 "threads = 1")
    reference.write_text(text, encoding="utf-8")
    q = ROOT / "quantize"
    path = tmp / "sweep.toml"
    path.write_text(
        f'[sweep]\nname = "t"\nsource_lock = "{ROOT / "locks/toy-guard.toml"}"\n'
        f'cohort = "{ROOT / "cohorts/toy-64.toml"}"\nlimit = {ROWS}\n'
        f'reference_profile = "{reference}"\nreference_name = "ref"\n'
        f'candidate_profile = "{ROOT / "runners/toy-mlx-q8.toml"}"\nreplicates = 100\n'
        f'[[recipe]]\nrecipe = "{q / "q8-g64.toml"}"\ncpu_recipe = "{q / "q8-g64-f32.toml"}"\n'
        '[[rule]]\nrule = "nuisance"\n', encoding="utf-8")
    return path


def _records(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for record in read_records(run_dir):
        data = record.to_dict()
        for name in TIMING_FIELDS:
            data.pop(name)
        out.append(data)
    return out


def _unmeasured(value: Any, out: Path) -> Any:
    """``value`` without the MEASURED fields, the sweep directory written as ``OUT``."""
    if isinstance(value, dict):
        return {k: _unmeasured(v, out) for k, v in value.items() if k not in MEASURED}
    if isinstance(value, list):
        return [_unmeasured(v, out) for v in value]
    if isinstance(value, str):
        return value.replace(str(out), "OUT")
    return value


def _json(path: Path, out: Path) -> Any:
    return _unmeasured(json.loads(path.read_text(encoding="utf-8")), out)


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from guardrepro.experiments.sweep import run_sweep

    base = tmp_path_factory.mktemp("sweep")
    spec, home = _spec(base), base / "home"
    run_sweep(spec, base / "local", home=home, progress=False, say=lambda _: None)
    return {"spec": spec, "home": home, "local": base / "local", "base": base}


class _Counter:
    def __init__(self, real: Any) -> None:
        self.real, self.calls = real, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.real(*args, **kwargs)


def test_ray_sweep_equals_the_local_sweep_building_once(
    cluster: Any, local_sweep: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One unit per run (``--units 1``): every configuration's records are the local
    sweep's; the tables and JSON match; the recipe is quantized once, pinned
    (``pins.json`` = the hash the run's manifest records), the teacher pass runs
    once, and all three runs went through one pool."""
    import guardrepro.artifacts.quantize.convert as convert
    import guardrepro.experiments.teacher as teacher
    import guardrepro.run.ray_pool as ray_pool
    from guardrepro.experiments.sweep import run_sweep
    from guardrepro.experiments.sweep_ray import run_configurations
    from guardrepro.rundir.manifest import read_manifest

    builds, teachers = _Counter(convert.quantize), _Counter(teacher.build_reference)
    pools = _Counter(ray_pool.dispatch)
    monkeypatch.setattr(convert, "quantize", builds)
    monkeypatch.setattr(teacher, "build_reference", teachers)
    monkeypatch.setattr(ray_pool, "dispatch", pools)
    monkeypatch.setattr("guardrepro.run.engine_ray.dispatch", pools)
    out, local = local_sweep["base"] / "ray", local_sweep["local"]
    options = RayOptions(workers=2, units=1, cpus_per_worker=1)
    result = run_sweep(local_sweep["spec"], out, home=local_sweep["home"], progress=False,
                       say=lambda _: None,
                       runs=lambda *a: run_configurations(*a, options=options))
    assert (builds.calls, teachers.calls, pools.calls) == (1, 1, 1)
    assert "ray: 3 runs in one pool" in result.actions
    for config in CONFIGS:
        mine, theirs = _records(out / config), _records(local / config)
        assert len(mine) == ROWS and mine == theirs, config
    pins = json.loads((out / "pins.json").read_text(encoding="utf-8"))
    assert set(pins) == {"reference", "q8-g64-f32"}
    manifest = read_manifest(out / "runs/q8-g64-f32")
    assert manifest is not None
    assert manifest.provenance.artifact_tree_sha256 == pins["q8-g64-f32"]["tree_sha256"]
    for name in ("summary.json", "frontier.json"):
        assert _json(out / name, out) == _json(local / name, local), name
    for config in CONFIGS[1:]:
        assert (_json(out / config / "summary.json", out)
                == _json(local / config / "summary.json", local)), config
    assert ((out / "runs/q8-g64-f32/divergence.json").read_bytes()
            == (local / "runs/q8-g64-f32/divergence.json").read_bytes().replace(
                str(local).encode(), str(out).encode()))
    assert _table(out / "summary.md") == _table(local / "summary.md")


def _table(path: Path) -> list[list[str]]:
    """summary.md's cells but the last two columns (peak MB, rows/s: measured)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split("|")[:-3] for line in lines if line.startswith("|")]


def _sweep(local_sweep: dict[str, Path], out: Path, options: RayOptions) -> Any:
    from guardrepro.experiments.sweep import run_sweep
    from guardrepro.experiments.sweep_ray import run_configurations

    return run_sweep(local_sweep["spec"], out, home=local_sweep["home"], progress=False,
                     say=lambda _: None,
                     runs=lambda *a: run_configurations(*a, options=options))


def test_interrupted_ray_sweep_resumes_without_repeating_work(
    cluster: Any, faults: Path, local_sweep: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two units per run; a unit of the rule baseline raises (in the Ray worker
    only): the sweep fails naming the row, leaves no summary, and the same
    command then completes without building again, generating only the rows
    missing, with every configuration's records the local sweep's (the rule is
    batch-invariant; the others are compared on what a resumed run shares)."""
    import guardrepro.artifacts.quantize.convert as convert
    import guardrepro.experiments.teacher as teacher
    from guardrepro.rundir.cohort import read_cohort

    out, local = local_sweep["base"] / "ray-resumed", local_sweep["local"]
    options = RayOptions(workers=2, units=2, cpus_per_worker=1)
    victim = read_cohort(local / "cohort-rows.jsonl")[ROWS - 1].row_id
    marker = faults / f"raise-rule-{victim}"
    marker.write_text("")
    try:
        with pytest.raises(InferenceError, match=re.escape(repr(victim))):
            _sweep(local_sweep, out, options)
    finally:
        marker.unlink()
    assert not (out / "summary.json").exists()
    assert not (out / "runs/rule-nuisance/summary.json").exists()
    before = {c: len(read_records(out / c)) if (out / c / "records.jsonl").exists() else 0
              for c in CONFIGS}
    assert before["runs/rule-nuisance"] < ROWS
    pins = (out / "pins.json").read_bytes()

    builds, teachers = _Counter(convert.quantize), _Counter(teacher.build_reference)
    monkeypatch.setattr(convert, "quantize", builds)
    monkeypatch.setattr(teacher, "build_reference", teachers)
    result = _sweep(local_sweep, out, options)
    assert (builds.calls, teachers.calls) == (0, 1)
    assert (out / "pins.json").read_bytes() == pins
    assert f"reference: {ROWS - before['reference']} generated" in result.actions
    assert f"run q8-g64-f32: {ROWS - before['runs/q8-g64-f32']} generated" in result.actions
    assert f"rule rule-nuisance: {ROWS - before['runs/rule-nuisance']} rows" in result.actions
    same = ("row_id", "output_token_ids", "output_text", "score", "status", "input_sha256",
            "provenance_sha256")
    for config in CONFIGS:
        mine, theirs = _records(out / config), _records(local / config)
        assert [r["row_id"] for r in mine] == [r["row_id"] for r in theirs], config
        fields = None if config == "runs/rule-nuisance" else same
        assert ([{k: r[k] for k in fields or r} for r in mine]
                == [{k: r[k] for k in fields or r} for r in theirs]), config


def test_pinned_hash_mismatch_is_refused_by_the_driver_and_by_the_actor(
    cluster: Any, local_sweep: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose artifact does not hash to its pin is refused by the driver's
    own check; with that check passed (the pin altered only in what the actors
    get) the actor refuses it in its constructor, naming its node and the run.
    Either way the run leaves nothing behind."""
    import dataclasses

    import guardrepro.run.engine_ray as engine_ray
    from guardrepro.errors import ProvenanceError
    from guardrepro.run.profile import RunProfile

    cohort = local_sweep["local"] / "cohort-rows.jsonl"
    profile = RunProfile.load(ROOT / "runners/toy-hf.toml").with_backend_options(threads=1)
    home, wrong = local_sweep["home"], "0" * 64
    options = RayOptions(workers=1, cpus_per_worker=1)
    run_dir = tmp_path / "new" / "run"
    with pytest.raises(ProvenanceError, match="not the pinned 000000000000"):
        engine_ray.run_many([engine_ray.RunRequest(profile, cohort, run_dir, wrong)],
                            options=options, progress=False, home=home)
    assert not (tmp_path / "new").exists()

    real = engine_ray._pool_job

    def tampered(*args: Any) -> Any:
        job = real(*args)
        return dataclasses.replace(job, spec={**job.spec, "pinned_tree_sha256": wrong})

    monkeypatch.setattr(engine_ray, "_pool_job", tampered)
    with pytest.raises(ProvenanceError, match=r"Ray actor on node .* refuses run "
                       rf"{re.escape(str(run_dir))}: its artifact hashes to [0-9a-f]{{12}}\.\.\. "
                       r"here, not the pinned 000000000000"):
        engine_ray.run_many([engine_ray.RunRequest(profile, cohort, run_dir)],
                            options=options, progress=False, home=home)
    assert not (tmp_path / "new").exists()
