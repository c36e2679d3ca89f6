"""The CLI convention (see ``guardrepro.cli``): short help on every verb, one
``--home``, one ``--progress/--no-progress``, ``--json`` as the one machine
output, numeric options that fail as usage errors, and ``main`` returning the
exit code (0 / 2 / 3) instead of raising."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
from recordsets import grid, rewrite_manifest, write_run

from guardrepro.cli import COMMANDS, cli, main

ROOT = Path(__file__).resolve().parent.parent

CACHE_VERBS = {"fetch", "verify", "quantize", "cohort build", "run", "check-invariance", "gate",
               "attribute", "reparse", "audit interaction", "audit tool-lookup",
               "audit association", "demo", "sweep"}
PROGRESS_VERBS = {"fetch", "run", "check-invariance", "quantize", "cohort build", "stats",
                  "vs-published", "demo", "sweep", "report", "guard-table", "verify", "lock"}
JSON_VERBS = {"stats", "gate", "compare", "attribute", "vs-published", "audit interaction",
              "audit tool-lookup", "audit association", "audit ladder", "guards",
              "guard-table", "frontier", "doctor", "verify", "cohort build",
              "check-invariance"}

# two bases, original + one edit; the reference agrees on b1 only
BASES = [("b1", "banking", 0), ("b2", "banking", 1)]


def walk() -> dict[str, click.Command]:
    """Every verb and subcommand of the registry by its full name."""
    ctx = click.Context(cli)
    found: dict[str, click.Command] = {}
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None, name
        found[name] = command
        if isinstance(command, click.Group):
            for sub, subcommand in command.commands.items():
                found[f"{name} {sub}"] = subcommand
    return found


def options(command: click.Command) -> set[str]:
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}


def test_every_verb_has_a_one_line_short_help() -> None:
    commands = walk()
    assert len(commands) == len(COMMANDS) + 6  # cohort build, four audits, guards new
    for name, command in commands.items():
        text = command.short_help
        assert text and "\n" not in text, name
        # `guardrepro --help` shows it whole (click truncates beyond its column)
        assert command.get_short_help_str(limit=58) == text, name


def test_shared_options_are_where_the_convention_says() -> None:
    commands = walk()
    assert set(commands) >= CACHE_VERBS | PROGRESS_VERBS | JSON_VERBS
    for name in CACHE_VERBS:
        assert "--home" in options(commands[name]), name
    for name in PROGRESS_VERBS:
        assert {"--progress", "--no-progress"} <= options(commands[name]), name
    for name in JSON_VERBS:
        json_param = [p for p in commands[name].params if "--json" in p.opts]
        assert json_param and json_param[0].is_flag, name  # type: ignore[attr-defined]


def test_every_numeric_option_is_a_range() -> None:
    for name, command in walk().items():
        for param in command.params:
            assert param.type not in (click.INT, click.FLOAT), (name, param.name)


@pytest.fixture()
def runs(tmp_path: Path) -> dict[str, Path]:
    ref = write_run(tmp_path / "ref", grid(BASES, {"original": [0, 1], "tool_alias": [1, 1]}))
    run = write_run(tmp_path / "run", grid(BASES, {"original": [0, 0], "tool_alias": [1, 0]}))
    spec = tmp_path / "gate.toml"
    spec.write_text(
        'name = "conv"\nrows = "originals"\n[reference]\ntype = "records"\n'
        f'path = "{(ref / "records.jsonl").as_posix()}"\n[thresholds]\nexpected_rows = 2\n'
        "min_coverage = 1.0\nmin_strict_agreement = 0.9\nmin_strict_agreement_gold_safe = 0.5\n"
        "min_strict_agreement_gold_unsafe = 0.5\n", encoding="utf-8")
    return {"ref": ref, "run": run, "spec": spec}


def call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_puts_the_result_on_stdout_and_the_table_on_stderr(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, ref = str(runs["run"]), str(runs["ref"])
    code, out, err = call(capsys, "stats", run, "--replicates", "50", "--no-progress", "--json")
    assert code == 0
    # the printed document is the one written to stats.json
    assert json.loads(out) == json.loads((runs["run"] / "stats.json").read_text())
    assert "wrote" in err and "wrote" not in out
    code, table, _ = call(capsys, "stats", run, "--replicates", "50", "--no-progress")
    assert code == 0 and "wrote" in table
    with pytest.raises(json.JSONDecodeError):
        json.loads(table)

    target = runs["run"].parent / "cmp.json"
    code, out, err = call(capsys, "compare", run, ref, "--json", "--out", str(target))
    assert code == 0 and json.loads(out) == json.loads(target.read_text())
    # b2 original: run 0 vs reference 1; b2 tool_alias: 0 vs 1 -> two strict disagreements
    assert json.loads(out)["summary"]["strict_disagreements"] == ["b2:original",
                                                                   "b2:tool_alias"]
    assert "strict agree" in err

    for args in (["guards"], ["doctor"], ["audit", "ladder"]):
        code, out, err = call(capsys, *args, "--json")
        assert code == 0 and isinstance(json.loads(out), list | dict) and err.strip(), args


def test_main_returns_0_2_3_without_raising(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run, spec = str(runs["run"]), str(runs["spec"])
    # originals: b1 agrees, b2 does not: strict agreement 1/2 < 0.9 -> the gate fails
    code, out, err = call(capsys, "gate", run, "--spec", spec, "--json")
    assert code == 3
    result = json.loads(out)
    assert result["passed"] is False and "FAIL" in err.upper()
    assert json.loads((runs["run"] / "gate.json").read_text()) == result
    # b2 is the only gold-unsafe row and disagrees: 0/1 passes only a 0.0 threshold
    loose = (runs["spec"].read_text()
             .replace("min_strict_agreement = 0.9", "min_strict_agreement = 0.5")
             .replace("gold_unsafe = 0.5", "gold_unsafe = 0.0"))
    runs["spec"].write_text(loose, encoding="utf-8")
    assert call(capsys, "gate", run, "--spec", spec)[0] == 0
    runs["spec"].write_text("name = \n", encoding="utf-8")
    code, _, err = call(capsys, "gate", run, "--spec", spec)
    assert code == 2 and "Traceback" not in err and "gate.toml" in err
    code, _, err = call(capsys, "stats", str(runs["run"].parent / "missing"))
    assert code == 2 and "does not exist" in err
    assert call(capsys, "--help")[0] == 0
    code, _, err = call(capsys, "no-such-verb")
    assert code == 2 and "No such command" in err


def test_progress_draws_real_bars_and_no_progress_silences_them(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report: the interval engine's bar and the guard table's (one step per
    run); verify: the bytes re-hashed; lock: the bytes hashed; all on stderr,
    none with --no-progress."""
    run, ref = str(runs["run"]), str(runs["ref"])
    manifest = runs["ref"] / "manifest.json"  # another guard's run of the same cohort
    rewrite_manifest(manifest, lambda data: data["provenance"].update(guard="other-guard"))
    quiet = call(capsys, "report", run, "--recompute", "--replicates", "20", "--guard-run", ref,
                 "--no-progress")
    assert quiet[0] == 0 and quiet[2] == ""
    code, out, err = call(capsys, "report", run, "--recompute", "--replicates", "20",
                          "--guard-run", ref)
    assert code == 0 and out == quiet[1] and "intervals" not in out
    # stderr is not a terminal: a line at the end of each, no bar frame
    assert "intervals:" in err and "\r" not in err
    assert "guard table: 2/2 runs (100%)" in err  # this run and the other guard's
    home = tmp_path / "home"
    lock = str(ROOT / "locks/toy-bench.toml")
    assert call(capsys, "fetch", lock, "--home", str(home), "--no-progress")[0] == 0
    code, _, err = call(capsys, "verify", lock, "--home", str(home))
    assert code == 0 and "verify toy-bench" in err
    code, _, err = call(capsys, "verify", lock, "--home", str(home), "--no-progress")
    assert code == 0 and "verify toy-bench" not in err
    data = ROOT / "guardrepro/data/toy_bench"
    code, _, err = call(capsys, "lock", str(data), "--out", str(tmp_path / "a.toml"))
    assert code == 0 and "lock a:" in err
    code, _, err = call(capsys, "lock", str(data), "--out", str(tmp_path / "b.toml"),
                        "--no-progress")
    assert code == 0 and err == ""


def _scaled(amount: str, prefix: str) -> float:
    return float(amount) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[prefix]


def test_progress_off_a_terminal_is_lines_and_never_bar_frames(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cohort build, verify, stats and lock with stderr captured (not a TTY): no
    carriage-return frame, and each ends with one progress line at 100%."""
    home = tmp_path / "home"
    lock = ROOT / "locks/toy-bench.toml"
    assert call(capsys, "fetch", str(lock), "--home", str(home), "--no-progress")[0] == 0
    errs = {}
    code, _, errs["verify"] = call(capsys, "verify", str(lock), "--home", str(home))
    assert code == 0
    pinned = sum(int(f["size"]) for f in tomllib.loads(lock.read_text())["file"])
    found = re.findall(r"^verify toy-bench: ([\d.]+)/([\d.]+) (k|M|G)?B \(100%\), \d+s$",
                       errs["verify"], re.M)
    assert len(found) == 1, errs["verify"]
    done, total, prefix = found[0]
    assert done == total and abs(_scaled(total, prefix) - pinned) <= _scaled("0.05", prefix)
    code, _, errs["cohort"] = call(capsys, "cohort", "build", str(ROOT / "cohorts/toy-64.toml"),
                                   "--out", str(tmp_path / "c.jsonl"), "--home", str(home))
    assert code == 0
    assert re.search(r"^cohort toy-64: (\d+)/\1 bases \(100%\), \d+s$", errs["cohort"], re.M)
    code, _, errs["stats"] = call(capsys, "stats", str(runs["run"]), "--replicates", "20")
    assert code == 0 and re.search(r"^intervals: [1-9]\d* intervals, \d+s$", errs["stats"], re.M)
    data = ROOT / "guardrepro/data/toy_bench"
    code, _, errs["lock"] = call(capsys, "lock", str(data), "--out", str(tmp_path / "a.toml"))
    assert code == 0
    size = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
    found = re.findall(r"^lock a: ([\d.]+)/([\d.]+) (k|M|G)?B \(100%\), \d+s$",
                       errs["lock"], re.M)
    assert len(found) == 1 and abs(_scaled(found[0][1], found[0][2]) - size) <= _scaled(
        "0.05", found[0][2]), errs["lock"]
    for verb, err in errs.items():
        assert "\r" not in err and "\x1b" not in err, verb


@pytest.mark.parametrize("args", [
    ["stats", "{run}", "--seed", "-1"],
    ["stats", "{run}", "--replicates", "0"],
    ["stats", "{run}", "--confidence", "1.5"],
    ["attribute", "--reference", "{run}", "--bf16", "{run}", "--seed", "-3"],
    ["guard-table", "{run}", "--seed", "x"],
    ["frontier", "{run}", "--replicates", "0"],
    ["demo", "--replicates", "abc"],
    ["audit", "association", "--replicates", "0"],
    ["run", "--profile", "p.toml", "--cohort", "c.jsonl", "--out", "o", "--workers", "0"],
    ["check-invariance", "--profile", "p.toml", "--cohort", "c.jsonl", "--sample", "0"],
])
def test_bad_numeric_option_is_exit_2_naming_it(
    args: list[str], runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [a.format(run=runs["run"]) for a in args]
    code, out, err = call(capsys, *argv)
    assert code == 2 and out == ""
    assert "Traceback" not in err and f"Invalid value for '{argv[-2]}'" in err


def test_home_holds_for_the_whole_verb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """cohort build reaches the cache only through the data lock, with no home
    argument on the way: --home must still decide which cache it reads."""
    empty = tmp_path / "empty"
    monkeypatch.setenv("GUARDREPRO_HOME", str(empty))
    home = tmp_path / "home"
    lock = str(ROOT / "locks/toy-bench.toml")
    assert call(capsys, "fetch", lock, "--home", str(home), "--no-progress")[0] == 0
    code, printed, err = call(capsys, "verify", lock, "--home", str(home), "--json")
    report = json.loads(printed)
    assert code == 0 and report["ok"] is True and report["lock"] == "toy-bench"
    assert {f["status"] for f in report["files"]} == {"ok"} and "verified" in err
    spec = str(ROOT / "cohorts/toy-64.toml")
    out = tmp_path / "c.jsonl"
    code, _, err = call(capsys, "cohort", "build", spec, "--out", str(out), "--no-progress")
    assert code == 2 and str(empty) in err and not out.exists()
    code, printed, _ = call(capsys, "cohort", "build", spec, "--out", str(out), "--home",
                            str(home), "--no-progress", "--json")
    assert code == 0 and json.loads(printed)["rows"] == len(out.read_text().splitlines())
    assert os.environ["GUARDREPRO_HOME"] == str(empty)  # restored after the verb


def test_module_entry_point_exits_with_the_code(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "guardrepro", "stats", str(tmp_path / "none")],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "guardrepro", "--version"],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0 and "guardrepro" in done.stdout



def _raise_in_guards(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """`guardrepro guards` raises ``exc`` where it would print."""
    from guardrepro.cli import guards_cmd

    def raiser(*args: object, **kwargs: object) -> None:
        raise exc

    monkeypatch.setattr(guards_cmd, "emit", raiser)


@pytest.mark.parametrize("wrapped", [
    RuntimeError("Failed to import transformers.models.auto"),  # transformers' lazy import
    ModuleNotFoundError("Could not import module 'AutoTokenizer'"),
])
def test_ctrl_c_wrapped_by_a_library_exits_130(wrapped: Exception, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    try:
        raise wrapped from KeyboardInterrupt()
    except Exception as exc:
        _raise_in_guards(monkeypatch, exc)
    assert main(["guards"]) == 130
    assert capsys.readouterr().err.strip().endswith("Aborted.")


def test_an_error_without_an_interrupt_is_not_taken_for_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _raise_in_guards(monkeypatch, RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        main(["guards"])
