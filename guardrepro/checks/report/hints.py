"""The commands a report suggests, written so that each runs as printed.

Input: the run directory (and its gate result and guard where a hint needs
them). Output: a ``Hint``: the command as an argument list (what a test
runs) and as shell text (what the report prints, paths quoted), or a
sentence where no command can be written without the reader's choice (no
shipped gate spec for the guard, no reference run named by the gate).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from guardrepro.checks.parity.gate_types import GateResult


@dataclass(frozen=True)
class Hint:
    """A suggested command (``argv`` after ``guardrepro``), or ``why`` none is."""

    argv: tuple[str, ...] = ()
    why: str = ""

    @property
    def text(self) -> str:
        """The command line as printed, or the sentence."""
        if not self.argv:
            return self.why
        return "guardrepro " + " ".join(shlex.quote(a) for a in self.argv)


def _run(run_dir: Path) -> str:
    return str(run_dir.resolve())


def gate_hint(run_dir: Path, guard: str) -> Hint:
    """``guardrepro gate`` with the shipped gate spec named after the guard."""
    from guardrepro.spec_dirs import spec_root

    spec = spec_root() / "checks" / f"{guard}.toml"
    if not spec.is_file():
        return Hint(why=f"no shipped gate spec is named after guard {guard!r}: gate the run "
                    "with a spec of yours (docs/CLI.md, gate)")
    return Hint(("gate", _run(run_dir), "--spec", guard))


def attribution_hint(run_dir: Path, gate: GateResult | None) -> Hint:
    """``guardrepro attribute`` against the run the gate compared this one to."""
    reference = (gate.reference if gate is not None else None) or {}
    path = reference.get("path") if reference.get("type") == "records" else None
    if not isinstance(path, str):
        return Hint(why="attribution needs a reference run, and no gate.json names one")
    run = _run(run_dir)
    return Hint(("attribute", "--reference", str(Path(path).parent), "--quantized", run,
                 "--out", str(Path(run) / "attribution.json")))


def report_hint(run_dir: Path) -> Hint:
    """``guardrepro report`` on the run (figures, with the report extra)."""
    return Hint(("report", _run(run_dir)))


def hints(run_dir: Path, guard: str, gate: GateResult | None) -> Sequence[Hint]:
    """Every hint a report of this run may print."""
    return (gate_hint(run_dir, guard), attribution_hint(run_dir, gate), report_hint(run_dir))
