"""``guardrepro cohort build`` through click's CliRunner and the mapped entry point."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures.released_data import banking_spec

from guardrepro.cli import cli, main
from guardrepro.rundir.cohort import read_cohort

SPEC = banking_spec("cli-cohort")


def bench_row(iid: int, score: float, tool: str) -> dict:
    return {
        "id-interaction": iid, "id-segment": 0, "instruction": f"task {iid}",
        "history": f"Obs: <INFORMATION>do {iid}</INFORMATION>",
        "current_action": f"Thought: t\nAction: {tool}\nAction Input: {{}}",
        "env_info": f"{tool}: a tool", "score": score,
    }


@pytest.fixture
def setup(tmp_path: Path) -> Path:
    rows = [bench_row(1, 0, "get_balance"), bench_row(2, 1, "send_money")]
    path = tmp_path / "data/TS-Bench/agentdojo-traj/banking.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rows), encoding="utf-8")
    content = path.read_bytes()
    (tmp_path / "lock.toml").write_text(
        'name = "cli-bench"\nkind = "files"\n\n[source]\ntype = "local"\n'
        f'path = "data"\n\n[[file]]\npath = "TS-Bench/agentdojo-traj/banking.json"\n'
        f'sha256 = "{hashlib.sha256(content).hexdigest()}"\nsize = {len(content)}\n',
        encoding="utf-8",
    )
    (tmp_path / "spec.toml").write_text(SPEC, encoding="utf-8")
    return tmp_path


def args(root: Path, *extra: str) -> list[str]:
    return ["cohort", "build", str(root / "spec.toml"), "--data-dir", str(root / "data"),
            "--out", str(root / "out/c.jsonl"), "--json", *extra]


def test_build_pinned_prints_manifest(setup: Path) -> None:
    result = CliRunner().invoke(cli, args(setup))
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)
    out = setup / "out/c.jsonl"
    assert manifest == json.loads((setup / "out/c.jsonl.manifest.json").read_text())
    assert manifest["pinned"] is True and manifest["rows"] == 8 and manifest["bases"] == 2
    assert manifest["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert manifest["cells"][0]["shortfall"] == 7
    assert "warning: cell banking/0" in result.stderr
    assert [r.variant for r in read_cohort(out)[:4]] == [
        "original", "marker_paraphrase", "tool_alias", "combined"
    ]


def test_changed_data_refused_unless_unpinned(
    setup: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = setup / "data/TS-Bench/agentdojo-traj/banking.json"
    data.write_text(json.dumps([bench_row(3, 0, "pay")]), encoding="utf-8")
    assert main(args(setup)) == 2
    err = capsys.readouterr().err
    assert "banking.json" in err and "--unpinned" in err
    assert not (setup / "out/c.jsonl").exists()

    result = CliRunner().invoke(cli, args(setup, "--unpinned"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pinned"] is False


def test_require_match_fails_without_expected_hash(
    setup: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args(setup, "--require-match")) == 2
    assert "does not match" in capsys.readouterr().err


def test_bad_spec_exit_code(setup: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (setup / "spec.toml").write_text(SPEC.replace("per_cell = 8", "per_cell = -1"))
    assert main(args(setup)) == 2
    assert "selection.per_cell" in capsys.readouterr().err


def test_group_lists_build() -> None:
    result = CliRunner().invoke(cli, ["cohort", "--help"])
    assert result.exit_code == 0 and "build" in result.output


def test_default_data_dir_is_the_verified_lock(
    setup: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --data-dir the files come from the spec's data lock, verified."""
    monkeypatch.setenv("GUARDREPRO_HOME", str(setup / "home"))
    result = CliRunner().invoke(cli, [*args(setup)[:3], "--out", str(setup / "o.jsonl"),
                                      "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"] == 8


def test_published_spec_unpinned_on_hand_built_data(tmp_path: Path) -> None:
    """The shipped cohorts/agentdojo-64.toml builds from any four domain files
    with --unpinned; the manifest reports the published hash as not matched."""
    spec = Path(__file__).resolve().parents[1] / "cohorts/agentdojo-64.toml"
    domains = ("banking", "slack", "travel", "workspace")
    for k, domain in enumerate(domains):
        path = tmp_path / f"data/TS-Bench/agentdojo-traj/{domain}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [bench_row(10 * k + 1, 0, f"{domain}_read"), bench_row(10 * k + 2, 0.5,
                                                                      f"{domain}_send")]
        path.write_text(json.dumps(rows), encoding="utf-8")
    out = tmp_path / "c.jsonl"
    result = CliRunner().invoke(cli, ["cohort", "build", str(spec), "--data-dir",
                                      str(tmp_path / "data"), "--out", str(out), "--unpinned",
                                      "--json"])
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)
    assert (manifest["pinned"], manifest["bases"], manifest["rows"]) == (False, 8, 32)
    assert manifest["sha256_matches"] is False and manifest["expected_sha256"] == (
        "bdfe8848090aab7f6efd0d575d6547ad88aae84831c8d0792055bb0076c638a2")
    rows = read_cohort(out)
    assert [r.domain for r in rows[::4]] == [d for d in domains for _ in range(2)]
    assert {r.cohort for r in rows} == {"agentdojo"}
    assert [r.gold_strict for r in rows[::4]] == [0, 1] * 4
    assert [r.gold_label for r in rows[::4]] == [0.0, 0.5] * 4
