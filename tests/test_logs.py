"""Logging: --verbose/--quiet on every verb, third-party print lines as log records."""

from __future__ import annotations

import logging

import click
import pytest

from guardrepro import logs
from guardrepro.cli import cli


def _commands(group: click.Group, ctx: click.Context) -> list[click.Command]:
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        found.append(command)
        if isinstance(command, click.Group):
            found += list(command.commands.values())
    return found


def test_every_verb_takes_verbose_and_quiet() -> None:
    ctx = click.Context(cli)
    commands = _commands(cli, ctx)
    assert len(commands) > 20
    for command in commands:
        opts = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert {"--verbose", "-v", "--quiet", "-q"} <= opts, command.name


def test_levels_and_one_handler() -> None:
    try:
        assert logs.setup(0) == logging.WARNING
        assert logs.setup(1) == logging.INFO
        assert logs.setup(2) == logging.DEBUG
        assert logs.setup(-1) == logging.ERROR
        ours = [h for h in logging.getLogger().handlers if isinstance(h, logs._StderrHandler)]
        assert len(ours) == 1
    finally:
        logs.setup(0)


def test_printed_info_lines_become_records(capsys: pytest.CaptureFixture[str],
                                           caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="mlx_lm"), logs.capture_stdout("mlx_lm"):
        print("[INFO] Loading")
        print("[INFO] Quantized model with 4.5 bits", end="")
    assert capsys.readouterr().out == ""
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("mlx_lm", "[INFO] Loading"), ("mlx_lm", "[INFO] Quantized model with 4.5 bits")]


def test_run_log_appends_info_records(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "run" / "run.log"
    for text in ("first", "second"):
        with logs.run_log(path):
            logging.getLogger("guardrepro.test").info(text)
    logging.getLogger("guardrepro.test").info("after")  # not in the file any more
    lines = path.read_text().splitlines()
    assert [line.rsplit(": ", 1)[1] for line in lines] == ["first", "second"]


CHILD = """
import json, logging, os, sys
from guardrepro import logs
buffer = logs.to_buffer(logging.INFO)
log = logging.getLogger("guardrepro.child")
log.debug("below the level")
log.info("unit %d of %s", 2, "run-a")
try:
    raise ValueError("boom")
except ValueError:
    log.warning("failed", exc_info=True)
print(json.dumps({"pid": os.getpid(), "entries": buffer.take(), "again": buffer.take()}))
"""


def test_records_sent_by_value_reach_the_parents_run_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """What a Ray actor does (logs.to_buffer in its process, as_entry dicts sent
    by value) and the driver replays (handle_entry): here across a real child
    process, whose pid each run.log line must name, with the message's
    arguments applied and the traceback kept as text."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    sent = json.loads(done.stdout)
    assert sent["again"] == []  # take() empties the buffer
    assert [e["msg"] for e in sent["entries"]] == ["unit 2 of run-a", "failed"]
    path = tmp_path / "run.log"
    with logs.run_log(path):
        for entry in sent["entries"]:
            logs.handle_entry(entry)
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0].endswith(f"INFO guardrepro.child [pid {sent['pid']}]: unit 2 of run-a")
    assert lines[1].endswith(f"WARNING guardrepro.child [pid {sent['pid']}]: failed")
    assert "Traceback (most recent call last)" in text and "ValueError: boom" in text
    assert "below the level" not in text
