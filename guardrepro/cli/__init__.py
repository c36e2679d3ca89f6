"""The ``guardrepro`` console script: a click group that loads each verb lazily.

Each verb lives in its own module under ``guardrepro.cli`` and exposes a
click command; ``COMMANDS`` maps the verb to ``"module:attribute"`` so a
missing optional dependency only matters when that verb runs. Every verb and
subcommand carries a one-line ``short_help`` (what ``guardrepro --help``
lists).

The convention every verb follows (shared options in ``guardrepro.cli.options``):

- ``--home DIR``: the cache root, on every verb that reads or writes the
  cache (fetch, verify, quantize, cohort build, run, check-invariance, gate,
  attribute, reparse, audit, demo, sweep). Default ``$GUARDREPRO_HOME``, else
  the user cache dir; the option holds for everything the verb calls.
- ``--progress/--no-progress``: progress on stderr, on every verb with long
  work (default on).
- ``--json``: on verbs that produce a result (stats, gate, compare,
  attribute, vs-published, audit subcommands, guards, guard-table, frontier,
  doctor, verify, cohort build, check-invariance), stdout carries exactly one
  JSON document, the result; tables, "wrote ..." lines and warnings go to
  stderr. Without ``--json`` the human text goes to stdout. ``--out`` writes
  files (a JSON copy, or the verb's output directory) whatever ``--json`` says.
  ``parse`` and ``reparse`` are JSON-lines filters: their stdout is always JSON
  lines.
- Numeric options are click ranges: a non-number or a value out of range is a
  usage error naming the option (exit 2), never a traceback.
- Exit codes, mapped here and nowhere else: 0 ok; 2 unusable input, a usage
  error or an integrity failure (and environment problems that reach this
  boundary as a plain OSError or UnicodeDecodeError: a read-only or full disk,
  a path under a regular file), with the path named; 3 a check ran on usable
  input and failed (``GateFailed``, ``CheckFailed``); 4 a transient failure
  worth retrying (``TransientFetchError``: a download still failing after its
  retries); 130 interrupted. Each ``guardrepro.errors`` class carries its code.
- ``main(argv)`` returns that code on success and on failure alike and never
  calls ``sys.exit``; the console script and ``python -m guardrepro`` end the
  process with it (``exit_with``).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import os
import signal
import sys
from typing import NoReturn

import click

from guardrepro import __version__
from guardrepro.errors import GuardreproError
from guardrepro.textsafe import shown_lines

COMMANDS: dict[str, str] = {
    "fetch": "guardrepro.cli.fetch_cmd:fetch",
    "verify": "guardrepro.cli.verify_cmd:verify",
    "quantize": "guardrepro.cli.quantize_cmd:quantize",
    "cohort": "guardrepro.cli.cohort_cmd:cohort",
    "parse": "guardrepro.cli.parse_cmd:parse",
    "reparse": "guardrepro.cli.parse_cmd:reparse",
    "run": "guardrepro.cli.run_cmd:run",
    "compare": "guardrepro.cli.compare_cmd:compare",
    "attribute": "guardrepro.cli.attribute_cmd:attribute",
    "merge": "guardrepro.cli.shard_cmd:merge",
    "check-invariance": "guardrepro.cli.invariance_cmd:check_invariance",
    "doctor": "guardrepro.cli.doctor_cmd:doctor",
    "gate": "guardrepro.cli.checks_cmd:gate",
    "stats": "guardrepro.cli.checks_cmd:stats",
    "vs-published": "guardrepro.cli.published_cmd:vs_published",
    "audit": "guardrepro.cli.checks_cmd:audit",
    "report": "guardrepro.cli.report_cmd:report",
    "demo": "guardrepro.cli.demo_cmd:demo",
    "lock": "guardrepro.cli.lock_cmd:lock",
    "guards": "guardrepro.cli.guards_cmd:guards",
    "guard-table": "guardrepro.cli.guard_table_cmd:guard_table",
    "table": "guardrepro.cli.table_cmd:table",
    "sweep": "guardrepro.cli.sweep_cmd:sweep",
    "frontier": "guardrepro.cli.frontier_cmd:frontier",
}


def _set_verbosity(ctx: click.Context, param: click.Parameter, value: int) -> None:
    if value:  # the group set up the default level; the last of -v/-q given wins
        from guardrepro import logs

        logs.setup(value if param.name == "verbose" else -value)


def add_verbosity(command: click.Command) -> None:
    """Give ``command`` (and every subcommand of a group) ``--verbose/-v`` (repeat for
    debug) and ``--quiet/-q`` (errors only); logging is set up once (``guardrepro.logs``)."""
    names = {name for param in command.params for name in getattr(param, "opts", [])}
    if "--verbose" not in names:
        command.params += [
            click.Option(["--verbose", "-v", "verbose"], count=True, expose_value=False,
                         is_eager=True, callback=_set_verbosity,
                         help="More log lines on stderr (-vv: debug)."),
            click.Option(["--quiet", "-q", "quiet"], count=True, expose_value=False,
                         is_eager=True, callback=_set_verbosity,
                         help="Only errors on stderr."),
        ]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_verbosity(sub)


class LazyGroup(click.Group):
    """Resolve verbs on demand; list only those whose module exists."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = []
        for name, target in COMMANDS.items():
            module = target.split(":", 1)[0]
            if importlib.util.find_spec(module) is not None:
                names.append(name)
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":", 1)
        if importlib.util.find_spec(module_name) is None:
            return None
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        add_verbosity(command)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and self.get_command(ctx, name) is None and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="guardrepro")
def cli() -> None:
    """Reproduce safety guard outputs, gate parity with published predictions,
    and measure how decisions move under counterfactual edits."""
    from guardrepro import logs

    logs.setup(0)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run one verb and return its exit code.

    Success and failure end the same way, by returning an int (0 ok, 2 unusable
    input or integrity failure, 3 a failed check, 4 a transient failure, 128 +
    the signal when interrupted: 130 SIGINT, 143 SIGTERM, 129 SIGHUP); nothing
    here calls ``sys.exit``. The console script and ``python -m guardrepro``
    pass the code to ``SystemExit``."""
    from guardrepro.cli.interrupts import terminations_interrupt

    try:
        with terminations_interrupt():
            value = cli.main(args=argv, prog_name="guardrepro", standalone_mode=False)
    except click.exceptions.Abort as exc:
        return _aborted(exc, argv)
    except click.exceptions.ClickException as exc:
        exc.show()
        return 2 if exc.exit_code == 1 else exc.exit_code
    except GuardreproError as exc:
        click.echo(f"error: {shown_lines(str(exc))}", err=True)
        return exc.exit_code
    except UnicodeDecodeError as exc:
        # readers name the file and line themselves; this is the last line of defence
        click.echo(f"error: input is not valid UTF-8: {shown_lines(str(exc))}", err=True)
        return 2
    except OSError as exc:
        click.echo(f"error: {shown_lines(_os_error_text(exc, argv))}", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt as exc:  # raised outside click's own handling
        return _aborted(exc, argv)
    except Exception as exc:
        # Ctrl-C inside a library that wraps it (transformers' lazy imports turn a
        # KeyboardInterrupt during an import into an import or runtime error)
        return _aborted(exc, argv)
    # --help and --version end in click's Exit, which it returns as the code
    return value if isinstance(value, int) else 0


def exit_with(code: int) -> NoReturn:
    """End the process with ``code`` once a verb has returned.

    When the verb loaded torch, every file it wrote is closed by then (records
    appended with fsync, outputs renamed into place, run.log's handler
    closed), so stdout and stderr are flushed, the exit handlers run
    (``atexit``: logging, temporary directories, multiprocessing) and the
    process ends at once (``os._exit``), skipping the interpreter's teardown
    of the thousands of modules torch and transformers import: measured on the
    shared 2-core machine at load ~13, 12-15 s of exit after importing them,
    0.4-0.7 s this way. Without torch, a plain ``SystemExit``."""
    if "torch" not in sys.modules:
        raise SystemExit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(code)


def console() -> NoReturn:
    """The console script: ``main()`` on ``sys.argv``, then ``exit_with`` its code."""
    try:
        code = main()
    except KeyboardInterrupt as exc:  # before main() took over (errors.Interrupted: 128 + signal)
        code = 128 + getattr(exc, "signum", int(signal.SIGINT))
    exit_with(code)


def _aborted(exc: BaseException, argv: list[str] | None) -> int:
    """Print what an interruption means and return 128 + its signal; an
    exception that no interruption caused is raised again."""
    from guardrepro.cli.interrupts import interruption, message

    signum = interruption(exc)
    if signum is None:
        if isinstance(exc, click.exceptions.Abort):  # click's own abort (a prompt's EOF)
            signum = int(signal.SIGINT)
        else:
            raise exc
    click.echo(message(signum, list(sys.argv[1:] if argv is None else argv)), err=True)
    return 128 + signum


def _os_error_text(exc: OSError, argv: list[str] | None = None) -> str:
    """An environment problem (read-only or full disk, missing or odd path) in words.
    When the failing call named no file, the command's output paths are named."""
    from guardrepro.artifacts.nofollow import describe_os_error

    paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
    args = list(sys.argv[1:] if argv is None else argv)
    outs = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--out", "--json-out")]
    outs += [a.split("=", 1)[1] for a in args if a.startswith("--out=")]
    if paths:
        where = " -> ".join(paths)
    elif outs:
        where = f"writing under {', '.join(outs)}"
    else:
        where = f"writing for `guardrepro {' '.join(args[:2])}`"
    return f"{where}: {describe_os_error(exc)}"
