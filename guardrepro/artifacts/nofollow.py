"""Opening what guardrepro writes without following a planted symlink.

Input: a path to write and the *trusted* directory above it: the directory a
verb was told to write into (``--out``, a run directory, the parent of an
``--out`` file). Symlinks on the way to the trusted directory are the user's
own choice and are followed; nothing beneath it is.
Output: descriptors opened one component at a time from the trusted directory
(``openat``/``mkdirat`` through ``dir_fd``), each with ``O_NOFOLLOW``, so a
symlink planted at the file, or at any directory between the trusted one and
the file, ends in ``OutputError`` naming it instead of a write elsewhere.

Invariants: the one place output files and directories are opened for
writing (the atomic writer, the record writer and its lock, ``run.log``, the
shard and sweep folders); a name that exists as a symlink is refused, never
replaced here (the atomic writer replaces a symlink at its final name through
``rename``, which never follows one).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from guardrepro.errors import OutputError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def symlink_refused(path: Path) -> OutputError:
    """The error for a symlink found where guardrepro writes."""
    return OutputError(
        f"cannot write {path}: it is a symbolic link, and guardrepro never writes through "
        "a link inside its output directory (remove the link, or choose another --out)")


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _relative_parts(path: Path, trusted: Path) -> tuple[str, ...]:
    try:
        parts = path.relative_to(trusted).parts
    except ValueError:
        raise OutputError(f"cannot write {path}: it is not inside {trusted}") from None
    if ".." in parts:
        raise OutputError(f"cannot write {path}: '..' leaves {trusted}")
    return parts


_REASONS = {
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOSPC: "no space left on the device (the disk is full)",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.ENOTDIR: "a component of the path is a regular file, not a directory",
    errno.EEXIST: "a component of the path exists and is not a directory",
    errno.EISDIR: "the path is a directory",
}


def describe_os_error(exc: OSError) -> str:
    """A one-line reason for an environment error, in words."""
    reason = _REASONS.get(exc.errno or 0)
    return reason if reason is not None else (exc.strerror or str(exc))


def output_error(path: Path, exc: OSError) -> OutputError:
    """OutputError for writing ``path`` (the offending path is named when it differs)."""
    where = str(path)
    culprit = None if exc.filename is None else Path(os.fsdecode(exc.filename))
    if culprit is not None and culprit != path and culprit.parent != path.parent:
        where += f" ({culprit})"  # e.g. a parent that is a regular file; not our temp file
    text = f"cannot write {where}: {describe_os_error(exc)}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        text += "; nothing partial was placed under the final name"
    return OutputError(text)


def _fd_error(path: Path, exc: OSError) -> OutputError:
    """``output_error`` of an error raised by a ``dir_fd`` call (its file name is
    relative to the descriptor: ``path`` names it in full)."""
    return output_error(path, OSError(exc.errno, exc.strerror))


def resolved_beneath(path: Path, trusted: Path | None) -> tuple[Path, Path]:
    """(``path``, ``trusted``) absolute, with ``trusted`` (default ``path``) resolved
    and ``path`` spelled beneath it as given: what lies below ``trusted`` is not
    resolved, so a symlink planted there is still found by ``open_dir``."""
    if trusted is None:
        resolved = path.resolve()
        return resolved, resolved
    base = trusted.resolve()
    return Path(os.path.normpath(base / os.path.relpath(path.absolute(), trusted.absolute()))
                ), base


def open_dir(path: Path, *, trusted: Path | None = None, create: bool = False) -> int:
    """A descriptor of the directory ``path``. ``trusted`` (default ``path``
    itself) is opened as given (created with its parents when ``create``); each
    component of ``path`` below it is opened with ``O_NOFOLLOW`` relative to its
    parent's descriptor (made first with ``mkdirat`` when ``create``). A symlink
    at any of them is an ``OutputError`` naming it. The caller closes the fd."""
    trusted = path if trusted is None else trusted
    parts = _relative_parts(path, trusted)
    try:
        if create:
            trusted.mkdir(parents=True, exist_ok=True)
        fd = os.open(trusted, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise output_error(trusted, exc) from None
    current = trusted
    for part in parts:
        current = current / part
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            link = _is_link(part, fd)
            os.close(fd)
            raise (symlink_refused(current) if link else _fd_error(current, exc)) from None
        os.close(fd)
        fd = child
    return fd


def open_in(dir_fd: int, path: Path, flags: int, mode: int = 0o644) -> int:
    """Open ``path.name`` in the directory ``dir_fd`` (the descriptor of
    ``path.parent``) with ``O_NOFOLLOW``; a symlink there is refused, naming ``path``."""
    try:
        return os.open(path.name, flags | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode,
                       dir_fd=dir_fd)
    except OSError as exc:
        if _is_link(path.name, dir_fd):
            raise symlink_refused(path) from None
        raise _fd_error(path, exc) from None


def read_fd(fd: int) -> bytes:
    """Every byte of the open file ``fd``, from offset 0 (its position unchanged)."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def read_in(dir_fd: int, path: Path) -> bytes | None:
    """The bytes of ``path.name`` in the directory ``dir_fd`` (the descriptor of
    ``path.parent``), None when it does not exist; a symlink there is refused."""
    try:
        os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    fd = open_in(dir_fd, path, os.O_RDONLY)
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def open_file(path: Path, flags: int, mode: int = 0o644, *, trusted: Path | None = None) -> int:
    """``os.open(path, flags, mode)`` without following any symlink below
    ``trusted`` (default ``path.parent``): neither at ``path`` nor at a directory
    on the way. With ``O_CREAT`` the missing directories are made."""
    parent = open_dir(path.parent, trusted=path.parent if trusted is None else trusted,
                      create=bool(flags & os.O_CREAT))
    try:
        return open_in(parent, path, flags, mode)
    finally:
        os.close(parent)


def make_dirs(path: Path, *, trusted: Path) -> Path:
    """Create ``path`` and the directories between ``trusted`` and it, refusing a
    symlink at any of them (``open_dir``); return ``path``."""
    os.close(open_dir(path, trusted=trusted, create=True))
    return path


def refuse_links(path: Path, *, trusted: Path) -> Path:
    """Refuse a symlink at ``path`` or at a directory between ``trusted`` and it,
    as far as they exist (nothing is created: a later writer makes the rest
    through ``open_dir``); return ``path``."""
    current = trusted
    for part in _relative_parts(path, trusted):
        current = current / part
        if current.is_symlink():
            raise symlink_refused(current)
        if not current.is_dir():
            break
    return path
