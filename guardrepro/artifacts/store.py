"""The guardrepro cache: where pinned artifacts live, and how paths stay inside it.

Input: an optional home directory (argument, else ``$GUARDREPRO_HOME``, else the
platform user cache dir + ``guardrepro``) and relative POSIX paths from lock files.
Output: paths under that home, content-addressed blobs, verification stamps.

Layout under the home::

    blobs/sha256/<hex>                 read-only file whose sha256 is <hex>
    artifacts/<lock>/<id>/<path>       materialized lock: hardlinks (or copies) of blobs
    downloads/<lock>/                  partial downloads (<name>.part), resumable
    staging/<lock>/                    hub downloads before they enter the blob store
    state/verified/<dev>-<ino>.json    "this inode hashed to <sha256>" (size, mtime, ctime,
                                       sampled-block digest at that time)
    state/locks/<lock>.lock            inter-process lock held while fetching

Invariants: nothing below the home is a symlink (every join checks each existing
component); relative paths are canonical (no absolute path, no ``..``, ``.`` or empty
component, no backslash, no NUL); a blob is only ever created by an atomic rename of
a file whose bytes were hashed to its name.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import platformdirs

from guardrepro.artifacts.nofollow import NOFOLLOW, open_dir, output_error
from guardrepro.artifacts.stamp_pack import packed_stamp
from guardrepro.errors import OutputError, UnsafePathError

CHUNK = 1 << 20
HOME_ENV = "GUARDREPRO_HOME"
TMP_TAG = ".tmp-"  # atomic_write_bytes temp files: .<name>.tmp-<pid>-<random>


def guardrepro_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``home`` if given, else ``$GUARDREPRO_HOME``, else the user cache dir.

    The root itself is resolved (a symlinked ``~/.cache`` is fine); everything below it
    is checked for symlinks by :func:`safe_join`.
    """
    if home is None:
        env = os.environ.get(HOME_ENV)
        home = env if env else platformdirs.user_cache_path("guardrepro", appauthor=False)
    return Path(home).expanduser().resolve()


def check_relpath(rel: str) -> tuple[str, ...]:
    """Split a canonical relative POSIX path into parts, or raise UnsafePathError."""
    if not isinstance(rel, str) or not rel:
        raise UnsafePathError(f"empty or non-string path {rel!r}")
    if "\x00" in rel or "\\" in rel:
        raise UnsafePathError(f"path {rel!r} contains a NUL or backslash")
    if rel.startswith("/") or (len(rel) > 1 and rel[1] == ":"):
        raise UnsafePathError(f"path {rel!r} is absolute")
    parts = tuple(rel.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise UnsafePathError(f"path {rel!r} has a {part or 'empty'!r} component")
    return parts


def safe_join(base: str | os.PathLike[str], rel: str) -> Path:
    """``base / rel`` after refusing escapes and any existing symlink on the way.

    ``base`` itself may not be a symlink either; components of ``rel`` that do not
    exist yet are fine (the caller may be about to create them).
    """
    base_path = Path(base)
    if base_path.is_symlink():
        raise UnsafePathError(f"{base_path} is a symlink")
    current = base_path
    for part in check_relpath(rel):
        current = current / part
        if current.is_symlink():
            raise UnsafePathError(f"{current} is a symlink (refused inside {base_path})")
    return current


def ensure_dir(base: Path, rel: str) -> Path:
    """Create ``base/rel`` (and parents below base), refusing symlinks; return it."""
    path = safe_join(base, rel)
    path.mkdir(parents=True, exist_ok=True)
    # re-check after creation: a racing process could have planted a link
    safe_join(base, rel)
    return path


def open_regular(path: Path) -> int:
    """Open ``path`` read-only without following a final symlink; must be a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if path.is_symlink():
            raise UnsafePathError(f"{path} is a symlink") from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePathError(f"{path} is not a regular file")
    return fd


def sha256_file(path: Path, on_chunk: Callable[[int], object] | None = None
                ) -> tuple[str, int]:
    """(sha256 hex, size in bytes) of a regular file; refuses symlinks.
    ``on_chunk`` is called with each chunk's size (a progress bar's ``update``)."""
    fd = open_regular(path)
    try:
        return sha256_fd(fd, on_chunk)
    finally:
        os.close(fd)


def sha256_fd(fd: int, on_chunk: Callable[[int], object] | None = None
              ) -> tuple[str, int]:
    """``sha256_file`` of the rest of the open file ``fd``."""
    digest = hashlib.sha256()
    size = 0
    while chunk := os.read(fd, CHUNK):
        digest.update(chunk)
        size += len(chunk)
        if on_chunk is not None:
            on_chunk(len(chunk))
    return digest.hexdigest(), size


def sha256_bytes(data: bytes) -> str:
    """The sha256 hex of ``data``: the hash ``sha256_file`` gives the file holding it."""
    return hashlib.sha256(data).hexdigest()


def read_hashed(path: Path) -> tuple[bytes, str]:
    """(bytes, sha256 hex) of a file read once: for a file that is both parsed
    and compared with a pinned hash, so that the bytes parsed are the bytes
    hashed. Read errors (a missing file) are the caller's ``OSError``."""
    data = Path(path).read_bytes()
    return data, sha256_bytes(data)


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it survives a crash (best effort)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_SWEPT: set[Path] = set()  # directories this process has cleared of dead writers' temp files


def _sweep_once(parent: Path) -> None:
    """Remove the temp files that dead writers left in ``parent``, the first time
    this process writes there: listing the directory on every write made N
    writes into one directory (``verify``'s N stamps) cost N squared."""
    if parent not in _SWEPT:
        remove_stale(parent, TMP_TAG)
        _SWEPT.add(parent)


def atomic_write_bytes(path: Path, data: bytes, *, trusted: Path | None = None,
                       durable: bool = True) -> None:
    """Write ``data`` to a temp file next to ``path``, fsync, then rename over ``path``
    (creating missing parent directories). The file is left with mode 0644.

    The one atomic file writer of the package: text and JSON writers encode and
    call it. An OSError (read-only directory, full disk, a parent that is a regular
    file) becomes OutputError naming ``path``; nothing is left under the final name
    or as a temp file. The temp file's name carries the writer's pid
    (``.<name>.tmp-<pid>-<random>``), so a temp file left by a killed writer is
    removed by the next process that writes into the same directory. A symlink at
    ``path`` is replaced (``rename`` never follows it); one at a directory between
    ``trusted`` (default ``path.parent``) and ``path`` is refused
    (``artifacts.nofollow``). ``durable=False`` skips both fsyncs, for a cache that
    a machine crash may lose without harm (a verification stamp: a lost or empty
    one only means a full re-hash); the rename stays atomic."""
    trusted = path.parent if trusted is None else trusted
    try:
        trusted.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(path, exc) from None
    parent = open_dir(path.parent, trusted=trusted, create=True)
    try:
        write_replace_at(parent, path, data, durable)
    finally:
        os.close(parent)
    if durable:
        fsync_dir(path.parent)


def write_replace_at(parent: int, path: Path, data: bytes, durable: bool = True) -> None:
    """``atomic_write_bytes`` in the directory ``parent`` (a descriptor of ``path.parent``)."""
    _sweep_once(path.parent)
    tmp = path.parent / f".{path.name}{TMP_TAG}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        # a new name (O_EXCL), never a link (O_NOFOLLOW)
        fd = os.open(tmp.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644,
                     dir_fd=parent)
    except OSError as exc:
        raise output_error(path, OSError(exc.errno, exc.strerror)) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), 0o644)  # whatever the umask
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp.name, path.name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp.name, dir_fd=parent)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise output_error(path, OSError(exc.errno, exc.strerror)) from None
        raise


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_dirs(parent: Path, tag: str) -> list[Path]:
    """Remove the directories ``.<name><tag><pid>-<random>`` in ``parent`` whose
    process ``pid`` no longer exists (temp dirs of a killed run); return them."""
    return remove_stale(parent, tag, dirs=True)


def remove_stale(parent: Path, tag: str, *, dirs: bool = False, only: str = "") -> list[Path]:
    """Remove the temp entries ``.<name><tag><pid>-<random>`` in ``parent`` (files,
    or directories with ``dirs``; names starting with ``only`` when given) whose
    process ``pid`` no longer exists; return them."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in sorted(parent.glob(f"{glob.escape(only)}*" if only else ".*")):
            name = entry.name
            if not name.startswith(".") or tag not in name or entry.is_symlink():
                continue
            pid_text = name.rsplit(tag, 1)[1].split("-", 1)[0]
            if not pid_text.isdigit() or entry.is_dir() != dirs or int(pid_text) == os.getpid():
                continue
            if not _pid_alive(int(pid_text)):
                if dirs:
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                removed.append(entry)
    return removed


def walk_files(root: Path) -> Iterator[tuple[str, Path]]:
    """Yield (relative POSIX path, path) of every regular file below ``root``, sorted.

    Raises UnsafePathError on a symlink or anything that is neither a file nor a
    directory; the order is the sort order of the relative path strings.
    """
    for rel in walk_relpaths(root):
        yield rel, root / rel


def walk_relpaths(root: Path) -> list[str]:
    """The relative POSIX paths ``walk_files`` yields, sorted, without a ``Path``
    object per file (one ``scandir`` per directory; a 200,000-file tree in a
    fraction of the time)."""
    if root.is_symlink():
        raise UnsafePathError(f"{root} is a symlink")
    found: list[str] = []
    stack = [(os.fspath(root), "")]
    while stack:
        current, prefix = stack.pop()
        with os.scandir(current) as entries:
            for entry in entries:
                if entry.is_symlink():
                    raise UnsafePathError(
                        f"{Path(entry.path)} is a symlink (refused inside {root})")
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, f"{prefix}{entry.name}/"))
                elif entry.is_file(follow_symlinks=False):
                    found.append(prefix + entry.name)
                else:
                    raise UnsafePathError(f"{Path(entry.path)} is not a regular file or directory")
    found.sort()
    return found


# --- content-addressed blobs ----------------------------------------------------------


def blob_path(home: Path, sha256: str) -> Path:
    """Where the blob with this sha256 lives (it may not exist)."""
    return safe_join(home, f"blobs/sha256/{sha256}")


def add_blob(home: Path, source: Path, sha256: str, *, move: bool) -> Path:
    """Put ``source`` (already hashed to ``sha256`` by the caller) into the blob store.

    ``move`` renames the file (same filesystem, e.g. a finished download); otherwise
    the bytes are copied to a temp file in the blob dir and renamed. The blob is made
    read-only. An existing blob is kept (content addressing makes them equal).
    """
    target = blob_path(home, sha256)
    ensure_dir(home, "blobs/sha256")
    if move:
        os.chmod(source, 0o444)
        os.replace(source, target)
    else:
        fd, tmp = tempfile.mkstemp(prefix=f".{sha256}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as out, os.fdopen(open_regular(source), "rb") as src:
                while chunk := src.read(CHUNK):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    fsync_dir(target.parent)
    return target


def link_or_copy(source: Path, target: Path) -> str:
    """Hardlink ``source`` at ``target`` (new name), else copy; return "hardlink" or "copy"."""
    try:
        os.link(source, target, follow_symlinks=False)
        return "hardlink"
    except OSError:
        fd = open_regular(source)
        with os.fdopen(fd, "rb") as src, open(target, "xb") as out:
            while chunk := src.read(CHUNK):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(target, 0o444)
        return "copy"


# --- verification stamps --------------------------------------------------------------

SAMPLE_BLOCKS = 8
SAMPLE_BLOCK = 1 << 16
FULL_ENV = "GUARDREPRO_VERIFY_FULL"


def verify_full_requested() -> bool:
    """True when ``$GUARDREPRO_VERIFY_FULL`` is set (``--verify-full``): stamps ignored."""
    return os.environ.get(FULL_ENV, "") not in ("", "0")


def _sample_offsets(size: int) -> list[int]:
    """Offsets of the sampled blocks: evenly spread, first and last block included."""
    if size <= SAMPLE_BLOCKS * SAMPLE_BLOCK:
        return list(range(0, size, SAMPLE_BLOCK))
    last = size - SAMPLE_BLOCK
    return [last * i // (SAMPLE_BLOCKS - 1) for i in range(SAMPLE_BLOCKS)]


def sampled_digest(path: Path) -> str:
    """sha256 over the sampled blocks of a regular file (the whole file when small)."""
    fd = open_regular(path)
    try:
        return sampled_digest_at(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def sampled_digest_at(fd: int, size: int) -> str:
    """``sampled_digest`` of the open file ``fd`` of ``size`` bytes."""
    digest = hashlib.sha256()
    for offset in _sample_offsets(size):
        digest.update(os.pread(fd, SAMPLE_BLOCK, offset))
    return digest.hexdigest()


def _stamp_name(st: os.stat_result) -> str:
    return f"{st.st_dev}-{st.st_ino}.json"


def _stamp_file(home: Path, st: os.stat_result) -> Path:
    return safe_join(home, f"state/verified/{_stamp_name(st)}")


def write_stamp(home: Path, path: Path, sha256: str) -> None:
    """Record that ``path`` (its inode) hashed to ``sha256`` at its current size, mtime
    and ctime, with a digest of its sampled blocks."""
    st = os.stat(path, follow_symlinks=False)
    ensure_dir(home, "state/verified")
    body = {
        "sha256": sha256,
        "size": st.st_size,
        "ino": st.st_ino,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "sampled": sampled_digest(path),
    }
    data, target = json.dumps(body).encode(), _stamp_file(home, st)
    with contextlib.suppress(OSError):
        if target.read_bytes() == data:
            # the same stamp: no rewrite (on ext4 a rename over an existing file
            # flushes the new file's data first, about 7 ms a stamp on re-verify)
            return
    atomic_write_bytes(target, data, durable=False)


def stamp_matches(home: Path, path: Path, sha256: str, size: int | None) -> bool:
    """True when a stamp says this inode, unchanged since, hashed to ``sha256``.

    The cheap check: inode, size, mtime and ctime equal to the stamp's (any write,
    ``touch``, ``chmod``, link or unlink moves the ctime, so a flipped byte whose
    mtime was put back still fails here), and the sampled blocks (first, last and
    evenly spaced ones, 512 KiB in all) hash as they did. False sends the caller to
    a full hash. The stamp is the inode's stamp file (``write_stamp``) or, when
    that is missing or does not fit, its entry in a pack (``stamp_pack``, what
    ``guardrepro verify`` writes). ``$GUARDREPRO_VERIFY_FULL`` (``--verify-full``)
    and ``guardrepro verify`` ignore stamps and re-hash everything.
    """
    if verify_full_requested():
        return False
    try:
        st = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            return False
        stamp_dir = safe_join(home, "state/verified")
    except (OSError, UnsafePathError):
        return False
    try:  # the stamp file in the directory just checked (never through a link)
        with os.fdopen(open_regular(stamp_dir / _stamp_name(st)), "rb") as fh:
            raw = json.loads(fh.read())
    except (OSError, ValueError):
        raw = None
    if not _stamp_fits(raw, st, sha256, size):
        # verify writes its stamps many to a file (stamp_pack): the same facts
        raw = packed_stamp(stamp_dir, st)
        if not _stamp_fits(raw, st, sha256, size):
            return False
    assert isinstance(raw, dict)
    try:
        return raw.get("sampled") == sampled_digest(path)
    except (OSError, UnsafePathError):
        return False


def _stamp_fits(raw: object, st: os.stat_result, sha256: str, size: int | None) -> bool:
    """A stamp (parsed) names this sha256 and the inode, size, mtime and ctime of ``st``."""
    return (
        isinstance(raw, dict)
        and raw.get("sha256") == sha256
        and raw.get("size") == st.st_size
        and raw.get("ino") == st.st_ino
        and raw.get("mtime_ns") == st.st_mtime_ns
        and raw.get("ctime_ns") == st.st_ctime_ns
        and (size is None or st.st_size == size)
    )
