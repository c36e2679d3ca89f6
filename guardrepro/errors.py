"""Every error guardrepro raises on purpose.

One base class, a small hierarchy, and each class also inherits the built-in
exception it resembles so callers that catch ``ValueError`` or
``FileNotFoundError`` keep working. The CLI maps these to exit codes at the
boundary only (see ``guardrepro.cli``); library code never calls ``sys.exit``.
"""

from __future__ import annotations


class GuardreproError(Exception):
    """Base class of every deliberate guardrepro error."""

    exit_code = 2


class InputError(GuardreproError, ValueError):
    """Unusable input: a malformed file, row or field, or a bad argument.

    Messages name the file, the row index (or the 1-based line of a text
    file) and the field where they apply.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        row: int | None = None,
        field: str | None = None,
        line: int | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.row = row
        self.field = field
        self.line = line
        where = []
        if file is not None:
            where.append(str(file))
        if line is not None:
            where.append(f"line {line}")
        if row is not None and (line is None or row != line - 1):
            where.append(f"row {row}")  # a JSON-lines row is shown as its 1-based line
        if field is not None:
            where.append(f"field {field!r}")
        prefix = ": ".join([", ".join(where)]) + ": " if where else ""
        super().__init__(prefix + message)


class LockError(InputError):
    """A lock file is malformed or inconsistent."""


class StepParseError(InputError):
    """A ReAct step whose Action Input the published step parser crashes on
    (JSON nested past the recursion limit, an integer literal past Python's
    digit limit); callers add the file and row."""


class IntegrityError(GuardreproError, ValueError):
    """Bytes on disk or on the wire do not match their pin (hash or size)."""


class UnsafePathError(GuardreproError, PermissionError):
    """A symlink, or a path that would escape the cache or artifact directory."""


class FetchError(GuardreproError, OSError):
    """A download failed for a reason other than integrity (HTTP, network)."""


class TransientFetchError(FetchError):
    """A download still failing after every retry (5xx, resets, stalls, deadline):
    worth trying again later, hence its own exit code."""

    exit_code = 4


class OutputError(GuardreproError, OSError):
    """An output or cache location cannot be written (read-only, full disk, a path
    component that is a regular file); the message names the path."""


class MissingArtifactError(GuardreproError, FileNotFoundError):
    """A pinned artifact is not in the cache; run ``guardrepro fetch`` first."""


class PromptError(GuardreproError, ValueError):
    """The guard prompt cannot be extracted, verified, rendered or tokenized."""


class ProvenanceError(GuardreproError, ValueError):
    """Records with different provenance would be mixed (resume, merge)."""


class DependencyMissingError(GuardreproError, ImportError):
    """An optional backend dependency is not installed; names the extra."""


def missing_extra(need: str, package: str, extra: str | None) -> DependencyMissingError:
    """The one wording of a missing dependency (raise it ``from`` the ImportError):
    what needs it, the package, and the install command, ``guardrepro[<extra>]``
    (or the package itself when ``extra`` is None: a core dependency)."""
    target = f"'guardrepro[{extra}]'" if extra else package
    return DependencyMissingError(
        f"{need} needs the Python package {package!r}, which is not installed: "
        f"pip install {target}")


class InferenceError(GuardreproError, RuntimeError):
    """A backend failed to generate for a request."""


class GateFailed(GuardreproError):
    """The parity gate ran on usable input and its thresholds were not met."""

    exit_code = 3


class CheckFailed(GuardreproError):
    """A check ran on usable input and its figures did not match (for example a
    run compared with published figures)."""

    exit_code = 3


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP received (``guardrepro.cli.interrupts``): it unwinds
    exactly as Ctrl-C's KeyboardInterrupt does (workers stopped, locks
    released), and the CLI exits with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        import signal

        self.signum = int(signum)
        self.name = signal.Signals(signum).name
        super().__init__(self.name)
