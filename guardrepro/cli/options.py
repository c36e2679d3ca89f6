"""Options and output helpers every ``guardrepro`` verb shares.

Input: nothing at import time; each decorator adds one click option to a
command. Output: the option values the verbs receive, and ``emit``, which
writes a verb's result under the JSON convention of the package docstring.

Invariants: ``--home`` means the same on every verb that touches the cache
(the directory given, else ``$GUARDREPRO_HOME``, else the user cache dir).
It reaches everything the verb calls, worker processes included, as the
``home`` argument only: the verb passes it on, and nothing in between falls
back to the environment (``artifacts.store.guardrepro_home`` reads
``$GUARDREPRO_HOME`` only when it is given no home). ``--json`` puts exactly
one JSON document on stdout and every human line on stderr. Numbers are taken
through click ranges only, so a bad value is a usage error (exit 2), never a
traceback.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from guardrepro.limits import MAX_REPLICATES
from guardrepro.textsafe import shown_lines

F = TypeVar("F", bound=Callable[..., Any])

# numeric parameter types: out-of-range or non-numeric values exit 2 with the option named
SEED = click.IntRange(min=0)
REPLICATES = click.IntRange(min=1, max=MAX_REPLICATES)  # documented in docs/FAULTS.md
COUNT = click.IntRange(min=0)
REPLICATES_OR_NONE = click.IntRange(min=0, max=MAX_REPLICATES)  # 0: no intervals
POSITIVE = click.IntRange(min=1)
CONFIDENCE = click.FloatRange(0, 1, min_open=True, max_open=True)

RUN_OR_FILE = click.Path(exists=True, path_type=Path)


class SpecFile(click.ParamType):
    """A spec file: a path, or the bare name of a shipped spec in ``folder``
    (``--profile toy-hf`` -> ``runners/toy-hf.toml``; see ``guardrepro.spec_dirs``)."""

    name = "spec"

    def __init__(self, folder: str, *, exists: bool = False) -> None:
        self.folder = folder
        self.exists = exists

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Path:
        from guardrepro.errors import InputError
        from guardrepro.spec_dirs import spec_path

        if isinstance(value, Path):
            return value
        try:
            path = spec_path(value, self.folder)
        except InputError as exc:
            self.fail(str(exc), param, ctx)
        if path.is_dir():
            self.fail(f"{path} is a directory", param, ctx)
        if self.exists and not path.exists():
            self.fail(f"file {str(path)!r} does not exist", param, ctx)
        return path
HOME_HELP = "Cache root (default: $GUARDREPRO_HOME, else the user cache dir + guardrepro)."

COHORT_OPTION = click.option(
    "--cohort", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
    help="Cohort file of the expected rows (default: for a run directory the one its "
    "manifest names, if on disk; else every base x every variant seen in the records or "
    "predictions). Expected rows without a prediction count as missing.",
)
OUT_OPTION = click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Directory for the JSON (default: the run directory, or the predictions "
    "file's directory).",
)
JSON_OPTION = click.option(
    "--json", "as_json", is_flag=True,
    help="Print the machine-readable result as JSON on stdout (human lines go to stderr).",
)
PROGRESS_OPTION = click.option(
    "--progress/--no-progress", default=True, show_default=True,
    help="Draw progress on stderr.",
)


def home_option(command: F) -> F:
    """Add ``--home``: the command receives ``home`` (a Path or None) and
    passes it to everything that reads the cache."""
    option = click.option("--home", type=click.Path(file_okay=False, path_type=Path),
                          default=None, help=HOME_HELP)
    return option(command)


def to_jsonable(value: Any) -> Any:
    """Dataclasses, paths and tuples as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def echo(text: str, *, err: bool = False) -> None:
    """A human line (or lines) on the terminal, every line through
    ``textsafe.shown``: ids, paths and excerpts from data cannot carry escape
    sequences, bidirectional overrides or NULs to the terminal."""
    click.echo(shown_lines(text), err=err)


def say(as_json: bool) -> Callable[[str], None]:
    """Where human lines go: stderr under ``--json``, else stdout."""
    return lambda line: echo(line, err=as_json)


def emit(as_json: bool, result: Any, human: str | None) -> None:
    """Write a verb's result: the JSON document on stdout and ``human`` on
    stderr with ``--json``; ``human`` alone on stdout without it."""
    if human is not None:
        echo(human, err=as_json)
    if as_json:
        click.echo(json.dumps(to_jsonable(result), indent=2, sort_keys=True, ensure_ascii=False))
