"""Fault suite, planted symlinks, the verbs beyond ``run``: no write leaves
the output directory.

``test_faults_symlinks.py`` covers ``run`` (records, lock, log, manifest, the
worker shards), a resume, ``stats``, ``report`` and ``compare --out``. Here a
symlink is planted at each other path a writing verb uses beneath the
directory it was told to write into (the parent of an ``--out`` file, an
``--out`` folder, a run directory, the cache home): a link to a file outside
at a file's name, a link to a folder outside at a folder's name. The verb
runs through the CLI (the rule backend, the toy data: a few seconds in all),
and nothing outside may change: the link is either replaced by the atomic
rename (exit as usual, a regular file now stands at the name) or refused
(exit 2, the error naming the link), never written through.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from loopback import serve_bytes, sha
from test_faults_env import self_gate
from test_faults_symlinks import (  # noqa: F401  (finished_run: a shared fixture)
    _outside,
    _plant,
    _snapshot,
    finished_run,
)
from test_faults_weights import cli
from test_fetch_http import DATA_A, entry, env, media, write_lock  # noqa: F401  (env: a fixture)

from guardrepro.errors import OutputError

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent
RULE = ROOT / "runners/rule-nuisance.toml"
TOY_BENCH = ROOT / "guardrepro/data/toy_bench"
TOY_GUARD = ROOT / "guardrepro/data/toy_guard"
LINKED = "it is a symbolic link"
REPLACED = "replaced"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, finished_run) -> dict[str, str]:  # noqa: F811
    """What the commands below are built from: the 6-row rule run, its cohort and
    its decisions as a predictions file, a rule run of the whole toy ASB split
    (for ``table``), a cache home."""
    from guardrepro.cli import main

    base = tmp_path_factory.mktemp("symlink-verbs")
    asb = base / "asb.jsonl"
    assert main(["cohort", "build", str(ROOT / "cohorts/toy-asb-all.toml"), "--data-dir",
                 str(TOY_BENCH), "--out", str(asb), "--no-progress"]) == 0
    assert main(["run", "--profile", str(RULE), "--cohort", str(asb), "--out",
                 str(base / "asb"), "--no-progress"]) == 0
    run, cohort = finished_run
    preds = base / "preds.jsonl"  # the run's decisions as a predictions file
    preds.write_text("".join(json.dumps({key: record[key] for key in (
        "base_sample_id", "variant", "domain", "gold_label", "score")}) + "\n"
        for record in map(json.loads, (run / "records.jsonl").read_text().splitlines())))
    return {"run": str(run), "cohort": str(cohort), "preds": str(preds), "asb": str(base / "asb"),
            "home": str(base / "home"), "root": str(ROOT), "toy": str(TOY_BENCH),
            "guard": str(TOY_GUARD), "rule": str(RULE)}


QUANTIZE = ("quantize --recipe {root}/quantize/q8-g64.toml --model {root}/locks/toy-guard.toml"
            " --out {w}/q8")
COHORT = ("cohort build {root}/cohorts/toy-64.toml --data-dir {toy} --out {w}/c.jsonl"
          " --no-progress")
LOCK = "lock {guard} --out {w}/a.toml"
FETCH = "fetch {root}/locks/toy-bench.toml --no-progress --home"
REPORT = "report {w}/run --replicates 50 --html --no-progress"
GUARDS_NEW = "guards new x --from {guard} --out {w}/o"
GUARD_TABLE = ("guard-table {w}/run --replicates 50 --out {w}/gt.json --figure {w}/gt.png"
               " --no-progress")

# (the command ({w}: this case's work folder, holding a copy of the run at
#  {w}/run and its predictions at {w}/preds.jsonl), the planted path relative
#  to {w}, a link to a file, a folder or an empty folder, and REPLACED (a
#  regular file stands there afterwards) or the words of the refusal (exit 2,
#  the link named))
CASES = [
    (COHORT, "c.jsonl", "file", REPLACED),
    (COHORT, "c.jsonl.manifest.json", "file", REPLACED),
    (LOCK, "a.toml", "file", "lock file exists"),
    (LOCK + " --force", "a.toml", "file", REPLACED),
    (QUANTIZE, "q8", "dir", "output already exists"),
    (QUANTIZE, "q8", "empty", "output already exists"),
    (QUANTIZE, "q8.lock.toml", "file", "already exists"),
    (QUANTIZE, "q8.quantize.json", "file", "already exists"),
    ("gate {w}/run --spec {w}/gate.toml", "run/gate.json", "file", REPLACED),
    ("gate {w}/run --spec {w}/gate.toml --out {w}/g", "g/gate.json", "file", REPLACED),
    ("frontier {w}/run --replicates 50 --out {w}/f", "f/frontier.json", "file", REPLACED),
    ("frontier {w}/run --replicates 50 --out {w}/f", "f/frontier.png", "file", REPLACED),
    (FETCH + " {home} --out {w}/p.toml", "p.toml", "file", REPLACED),
    (FETCH + " {w}/home", "home/blobs", "dir", "is a symlink"),
    (FETCH + " {w}/home", "home/artifacts", "dir", "is a symlink"),
    (FETCH + " {w}/home", "home/state", "dir", "is a symlink"),
    (REPORT, "run/report.html", "file", REPLACED),
    (REPORT, "run/margin_hist.png", "file", REPLACED),
    (REPORT, "run/stats.json", "file", REPLACED),
    ("stats {w}/preds.jsonl --replicates 50", "preds.stats.json", "file", REPLACED),
    ("stats {w}/run --replicates 50 --export {w}/s.csv", "s.csv", "file", REPLACED),
    ("table {asb} --benchmark asb --data-dir {toy} --replicates 0 --out {w}/t.json", "t.json",
     "file", REPLACED),
    (GUARD_TABLE, "gt.json", "file", REPLACED),
    (GUARD_TABLE, "gt.png", "file", REPLACED),
    ("attribute --reference {w}/run --quantized {w}/run --replicates 50 --out {w}/a.json",
     "a.json", "file", REPLACED),
    ("vs-published {w}/run --out {w}/v.json", "v.json", "file", REPLACED),
    ("check-invariance --profile {rule} --cohort {cohort} --sample 2 --out {w}/i.json"
     " --no-progress", "i.json", "file", REPLACED),
    ("audit ladder --out {w}/l.json", "l.json", "file", REPLACED),
    (GUARDS_NEW, "o/guards", "dir", LINKED),
    (GUARDS_NEW, "o/runners", "dir", LINKED),
    (GUARDS_NEW, "o/guards/x.toml", "file", "file exists"),
    (GUARDS_NEW + " --force", "o/guards/x.toml", "file", REPLACED),
    ("merge {w}/run --out {w}/m", "m", "empty", LINKED),
    ("merge {w}/run --out {w}/m", "m", "dir", LINKED),
]
# exit codes other than 0 of a verb whose write went through (a check that failed)
CODES = {"vs-published": 3}


def _verb(command: str) -> str:
    words = command.split()
    return " ".join(words[:2]) if words[0] in ("cohort", "guards", "audit") else words[0]


@pytest.mark.parametrize(("command", "planted", "kind", "outcome"), CASES,
                         ids=[f"{_verb(c)}:{p}:{k}" for c, p, k, _ in CASES])
def test_a_link_planted_where_a_verb_writes_is_never_written_through(
        command, planted, kind, outcome, inputs, tmp_path, capsys):
    outside = _outside(tmp_path)
    before = _snapshot(outside)
    work = tmp_path / "work"
    shutil.copytree(inputs["run"], work / "run")
    shutil.copyfile(inputs["preds"], work / "preds.jsonl")
    self_gate(work / "gate.toml", work / "run").write_text(
        (work / "gate.toml").read_text().replace("expected_rows = 8", "expected_rows = 3"))
    link = work / planted
    _plant(link, outside, kind)
    args = command.format(w=work, **inputs).split()
    code, _, err = cli(capsys, *args)
    assert _snapshot(outside) == before, err
    assert "Traceback" not in err
    if outcome == REPLACED:
        assert code == CODES.get(args[0], 0), err
        assert link.is_file() and not link.is_symlink(), err
    else:
        assert code == 2, err
        assert str(link) in err and outcome in err, err
        assert link.is_symlink()


def test_the_demo_replaces_a_linked_manifest_and_refuses_a_linked_run_folder(
        inputs, tmp_path, capsys):
    """``demo --out D``: ``D/cohort.jsonl.manifest.json`` (written whole) and
    ``D/hf-fp32`` (its transformers run, refused before the run starts)."""
    outside = _outside(tmp_path)
    before = _snapshot(outside)
    demo = tmp_path / "demo"
    _plant(demo / "cohort.jsonl.manifest.json", outside, "file")
    _plant(demo / "hf-fp32", outside, "dir")
    code, _, err = cli(capsys, "demo", "--out", str(demo), "--home", inputs["home"],
                       "--no-mlx", "--no-progress")
    assert _snapshot(outside) == before, err
    assert code == 2 and f"{demo / 'hf-fp32'}: {LINKED}" in err, err
    manifest = demo / "cohort.jsonl.manifest.json"
    assert manifest.is_file() and not manifest.is_symlink()
    assert (demo / "cohort.jsonl").is_file()


def test_the_demos_artifacts_folder_planted_as_a_link_is_refused_before_quantizing(tmp_path):
    """``demo --out D`` quantizes the toy guard into ``D/artifacts/``: a link
    planted there is refused before the conversion (it was converted into the
    link's target), as a sweep's ``artifacts/`` below."""
    from guardrepro import demo

    outside = _outside(tmp_path)
    before = _snapshot(outside)
    out = tmp_path / "demo"
    _plant(out / "artifacts", outside, "empty")
    result = demo.DemoResult(out_dir=out, cohort=out / "cohort.jsonl")
    with pytest.raises(OutputError, match=f"{out / 'artifacts'}: {LINKED}"):
        demo._run_mlx(ROOT, result, demo._Steps(result, 1, lambda _: None), False,
                      tmp_path / "home")
    assert _snapshot(outside) == before


@pytest.mark.parametrize("planted", ["reference", "artifacts"])
def test_a_sweeps_reference_or_artifacts_folder_planted_as_a_link_is_refused(
        planted, tmp_path):
    """The sweep's reference run folder and its artifacts folder (quantized
    checkpoints); runs/, a run folder and rules/ are in test_faults_symlinks.py.
    Each is refused before anything is run or converted."""
    from test_sweep import REPO, RULES, _spec

    from guardrepro.experiments import sweep
    from guardrepro.experiments.spec import load_sweep

    outside = _outside(tmp_path)
    before = _snapshot(outside)
    q = REPO / "quantize"
    recipe = f'[[recipe]]\nrecipe = "{q / "q8-g64.toml"}"\ncpu_recipe = "{q / "q8-g64-f32.toml"}"\n'
    spec = load_sweep(_spec(tmp_path, recipes=recipe + RULES, limit=4))
    out = tmp_path / "out"
    _plant(out / planted, outside, "dir")
    result = sweep.SweepResult(out=out, device="Device(cpu, 0)")
    with pytest.raises(OutputError, match=f"{out / planted}: {LINKED}"):
        if planted == "reference":
            sweep._reference(spec, out, out / "cohort-rows.jsonl", tmp_path / "home", result,
                             progress=False)
        else:
            sweep._artifact(spec.recipes[0].chosen(True), spec, out, tmp_path / "home", result)
    assert _snapshot(outside) == before


# a github lock's file downloads into <home>/downloads/<lock>/<name>.part, with
# its resume metadata in <name>.part.json, <name> being the first 16 hex digits
# of the sha256 of the file's path in the lock, a dash and its base name
PART = hashlib.sha256(b"data/a.json").hexdigest()[:16] + "-a.json.part"


@pytest.mark.parametrize(("planted", "kind", "outcome"), [
    ("downloads", "dir", "is a symlink"),
    (f"downloads/t/{PART}", "file", LINKED),
    (f"downloads/t/{PART}.json", "file", REPLACED),
], ids=["downloads", "part", "part.json"])
def test_a_link_planted_in_fetchs_downloads_folder_is_never_written_through(
        planted, kind, outcome, server, env, tmp_path, capsys):  # noqa: F811
    """``fetch`` of a github lock from a loopback server: a link at the
    partial download is refused (its bytes were appended to the link's target),
    one at its metadata is replaced (it was overwritten through the link)."""
    server.route(media("data/a.json"), serve_bytes(DATA_A))
    lock = write_lock(tmp_path / "t.toml", [entry("data/a.json", DATA_A)])
    outside = _outside(tmp_path)
    before = _snapshot(outside)
    link = env / planted
    _plant(link, outside, kind)
    code, _, err = cli(capsys, "fetch", str(lock), "--home", str(env), "--no-progress")
    assert _snapshot(outside) == before, err
    assert "Traceback" not in err
    if outcome == REPLACED:  # written whole, then removed once the download is placed
        assert code == 0, err
        assert not link.is_symlink() and not link.exists()
        assert (env / "blobs/sha256" / sha(DATA_A)).read_bytes() == DATA_A
    else:
        assert code == 2 and str(link) in err and outcome in err, err
        assert link.is_symlink()
