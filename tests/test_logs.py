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
