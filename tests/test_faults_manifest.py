"""Fault suite, manifests: a manifest edited after its run wrote it is refused
by every reader, naming the field that changed.

A rule run writes a real manifest; one field is then edited as a person or a
script would (the value only, digests left alone), and each reader (stats,
report, gate's and compare's loaders, merge, resume) must exit 2 naming the
manifest and the field.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_faults_input import RULE, _paired_cohort
from test_faults_weights import cli

from guardrepro.rundir.manifest import field_digests
from guardrepro.schema import Provenance, canonical_json, sha256_text

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a finished 6-row rule run, its cohort)."""
    from guardrepro.cli import main

    base = tmp_path_factory.mktemp("manifest")
    cohort = _paired_cohort(base / "cohort.jsonl", 6)
    assert main(["run", "--profile", str(RULE), "--cohort", str(cohort), "--out",
                 str(base / "run"), "--no-progress"]) == 0
    return base / "run", cohort


def _edit(path: Path, field: str, value: object) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    *parents, leaf = field.split(".")
    target = data
    for name in parents:
        target = target[name]
    target[leaf] = value
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


EDITS = [("provenance.guard", "ts-guard"), ("run_id", "another-run"),
         ("provenance.decoding.max_new_tokens", 2), ("cohort.path", "/elsewhere.jsonl"),
         ("profile.sha256", "0" * 64)]
READERS = ["stats", "report", "resume", "merge", "compare"]


def _reader(verb: str, run: Path, cohort: Path, tmp_path: Path) -> list[str]:
    if verb == "resume":
        return ["run", "--profile", str(RULE), "--cohort", str(cohort), "--out", str(run),
                "--no-progress"]
    if verb == "merge":
        return ["merge", str(run), "--out", str(tmp_path / "merged")]
    if verb == "compare":
        return ["compare", str(run), str(run)]
    return [verb, str(run), "--replicates", "50"]


@pytest.mark.parametrize("verb", READERS)
@pytest.mark.parametrize(("field", "value"), EDITS, ids=[f for f, _ in EDITS])
def test_an_edited_manifest_is_refused_naming_the_field(made, tmp_path, capsys, verb, field,
                                                         value):
    run = tmp_path / "run"
    shutil.copytree(made[0], run)
    manifest = run / "manifest.json"
    _edit(manifest, field, value)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    code, _, err = cli(capsys, *_reader(verb, run, made[1], tmp_path))
    assert code == 2, err
    assert f"{manifest}, field '{field}'" in err and "after the run wrote" in err, err
    assert "Traceback" not in err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # nothing written


def test_a_manifest_from_before_the_digests_is_still_rehashed(made, tmp_path, capsys):
    """A manifest without ``field_sha256`` (written before it existed) still reads,
    and its provenance is still checked against provenance_sha256."""
    run = tmp_path / "run"
    shutil.copytree(made[0], run)
    manifest = run / "manifest.json"
    data = json.loads(manifest.read_text(encoding="utf-8"))
    del data["field_sha256"]
    manifest.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    assert cli(capsys, "stats", str(run), "--replicates", "50")[0] == 0
    _edit(manifest, "provenance.guard", "ts-guard")
    code, _, err = cli(capsys, "stats", str(run), "--replicates", "50")
    assert code == 2 and f"{manifest}, field 'provenance'" in err, err


def test_the_digests_are_those_of_each_field_as_written(made):
    """Each digest recomputed here by hand: 16 hex of the sha256 of the field's
    canonical JSON; the provenance hash is that of the provenance object."""
    data = json.loads((made[0] / "manifest.json").read_text(encoding="utf-8"))
    digests = data["field_sha256"]
    assert digests["run_id"] == sha256_text(json.dumps("run"))[:16]
    assert digests["provenance.guard"] == sha256_text(json.dumps("rule-nuisance"))[:16]
    assert digests["cohort.rows"] == sha256_text("6")[:16]
    leaves = {"run_id", "created_at", "provenance_sha256", "cohort.path", "cohort.rows",
              "cohort.sha256", "profile.path", "profile.sha256", "shard", "rows_selected",
              "guardrepro_version", "git_commit"}
    assert leaves <= set(digests) and "field_sha256" not in digests
    assert all(k in leaves or k.startswith(("provenance.", "guard_spec")) for k in digests)
    assert field_digests(data) == digests
    assert data["provenance_sha256"] == sha256_text(canonical_json(data["provenance"]))
    assert Provenance.from_dict(data["provenance"]).sha256 == data["provenance_sha256"]
