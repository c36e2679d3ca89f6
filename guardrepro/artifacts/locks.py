"""Lock files: the pinned list of upstream artifacts, read strictly, written atomically.

Input: a TOML file (format below). Output: a frozen :class:`Lock`. ``save_lock``
writes one back (header comment block kept, body via ``tomli_w``) with a temp file,
fsync and rename, after checking the text it is about to write parses back to the
same lock.

Format::

    # leading comment lines are kept when guardrepro rewrites the lock
    name = "toolsafe"              # [a-z0-9][a-z0-9._-]*; names the cache directory
    kind = "files"                 # "files" or "checkpoint"
    description = "..."            # optional

    [source]                       # one of:
    type = "github"                #   repo = "owner/name", commit = 40-hex
    type = "hf"                    #   repo, revision = 40-hex, repo_type = "model" (optional)
    type = "package"               #   dir = "data/toy_guard" (optional; relative to guardrepro/)
    type = "local"                 #   path = dir (relative to the lock file, or absolute),
                                   #   tree_sha256 / tree_files / tree_bytes (optional)

    [[file]]
    path = "TS-Bench/x.json"       # canonical relative POSIX path
    sha256 = "<64 hex>"            # with size; both absent only while pending (below)
    size = 123
    lfs = true                     # github only, required there: media URL vs raw URL
    extract = "variable_name"      # optional: a string assigned in this Python file ...
    extract_sha256 = "<64 hex>"    # ... whose UTF-8 sha256 is pinned instead of the file's
    pinned_by = "first-download"   # sha256/size unknown upstream: recorded at first
    pinned_at = 2026-05-09         # verified download (pinned_at = that date)

Invariants: keys outside the format are errors (naming file, entry index and field); a file
entry without ``sha256`` or without ``size`` must say ``pinned_by = "first-download"`` and
is *pending*: what is missing is recorded at the first verified download, and what is
given (a published sha256 without its size, a published size without its sha256) is
checked then; paths are unique and none is a directory of another; hex is lowercase.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w

from guardrepro.artifacts.lock_text import read_lock_toml
from guardrepro.artifacts.store import atomic_write_bytes, check_relpath, sha256_file
from guardrepro.errors import LockError, UnsafePathError
from guardrepro.limits import lone_surrogate_field
from guardrepro.spec import HEX40, HEX64, REQUIRED, Table, expect_kind

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FIRST_DOWNLOAD = "first-download"
KINDS = ("files", "checkpoint")


@dataclass(frozen=True)
class GithubSource:
    """Files of a GitHub repo at a pinned commit (LFS media URL or raw URL per file)."""

    repo: str
    commit: str
    type: Literal["github"] = "github"


@dataclass(frozen=True)
class HfSource:
    """Files of a Hugging Face Hub repo at a pinned 40-hex revision."""

    repo: str
    revision: str
    repo_type: str = "model"
    type: Literal["hf"] = "hf"


@dataclass(frozen=True)
class PackageSource:
    """Files shipped inside the guardrepro package, below ``guardrepro/<dir>``."""

    dir: str | None = None
    type: Literal["package"] = "package"


@dataclass(frozen=True)
class LocalSource:
    """A directory on disk verified in place (never copied), e.g. a quantized artifact."""

    path: str
    tree_sha256: str | None = None
    tree_files: int | None = None
    tree_bytes: int | None = None
    type: Literal["local"] = "local"


Source = GithubSource | HfSource | PackageSource | LocalSource


@dataclass(frozen=True)
class LockedFile:
    """One pinned file. ``sha256`` or ``size`` None means pending first download."""

    path: str
    sha256: str | None = None
    size: int | None = None
    lfs: bool | None = None
    extract: str | None = None
    extract_sha256: str | None = None
    pinned_by: str | None = None
    pinned_at: dt.date | None = None

    @property
    def pending(self) -> bool:
        """True while the file's sha256 or size is still to be recorded at first download."""
        return self.sha256 is None or self.size is None

    def matches(self, sha256: str, size: int) -> bool:
        """True when ``sha256`` and ``size`` agree with every value the entry pins."""
        return self.sha256 in (None, sha256) and self.size in (None, size)

    def recorded(self, sha256: str, size: int, when: dt.date) -> LockedFile:
        """This entry with a first-download pin filled in (published values kept)."""
        if not self.pending:
            raise LockError(f"{self.path} is already pinned", field="sha256")
        if not self.matches(sha256, size):
            raise LockError(f"{self.path}: sha256 {sha256} size {size} differ from the"
                            f" published sha256 {self.sha256} size {self.size}", field="sha256")
        return dataclasses.replace(self, sha256=sha256, size=size, pinned_at=when)


@dataclass(frozen=True)
class Lock:
    """A parsed lock file. ``path`` is where it was read from (not serialized)."""

    name: str
    kind: str
    source: Source
    files: tuple[LockedFile, ...]
    description: str | None = None
    header: str = ""
    path: Path | None = field(default=None, compare=False)

    def file(self, rel: str) -> LockedFile:
        """The entry for ``rel``; KeyError if the lock has none."""
        for entry in self.files:
            if entry.path == rel:
                return entry
        raise KeyError(rel)

    @property
    def pending(self) -> tuple[LockedFile, ...]:
        """Entries whose sha256 is still to be recorded."""
        return tuple(entry for entry in self.files if entry.pending)

    def with_files(self, files: tuple[LockedFile, ...]) -> Lock:
        """A copy with the file entries replaced (same order expected)."""
        return dataclasses.replace(self, files=files)

    def local_dir(self) -> Path:
        """For a "local" source: its directory (relative paths from the lock file's dir)."""
        if not isinstance(self.source, LocalSource):
            raise LockError(f"lock {self.name!r} has no local source", field="source")
        path = Path(self.source.path).expanduser()
        if not path.is_absolute():
            if self.path is None:
                raise LockError("a relative local path needs the lock's own path", field="path")
            path = self.path.parent / path
        return path


# --- parsing ------------------------------------------------------------------------


class _Fields(Table):
    """The shared strict table, raising ``LockError``; ``required`` says whether
    an absent key is an error (absent and optional reads as None)."""

    def __init__(self, table: Any, file: str, row: int | None, where: str) -> None:
        super().__init__(table, file, where.rstrip("."), row=row, error=LockError)

    def get(self, name: str, kind: type | tuple[type, ...], *, required: bool) -> Any:
        return self.take(name, kind, REQUIRED if required else None)

    def pattern(self, name: str, regex: re.Pattern[str], what: str,  # type: ignore[override]
                *, required: bool) -> Any:
        return super().pattern(name, regex, what, REQUIRED if required else None)


def _parse_source(raw: Any, file: str) -> Source:
    fields = _Fields(raw, file, None, "source.")
    kind = fields.get("type", str, required=True)
    allowed = {
        "github": GithubSource,
        "hf": HfSource,
        "package": PackageSource,
        "local": LocalSource,
    }.get(kind)
    if allowed is not None:
        fields.only(*(f.name for f in dataclasses.fields(allowed) if f.name != "type"))
    source: Source
    if kind == "github":
        source = GithubSource(
            repo=fields.pattern("repo", REPO, "owner/name", required=True),
            commit=fields.pattern("commit", HEX40, "a 40-hex commit", required=True),
        )
    elif kind == "hf":
        repo_type = fields.get("repo_type", str, required=False) or "model"
        if repo_type not in ("model", "dataset", "space"):
            raise fields.fail("repo_type", f"must be model, dataset or space, got {repo_type!r}")
        source = HfSource(
            repo=fields.pattern("repo", REPO, "owner/name", required=True),
            revision=fields.pattern("revision", HEX40, "a 40-hex revision", required=True),
            repo_type=repo_type,
        )
    elif kind == "package":
        sub = fields.get("dir", str, required=False)
        if sub is not None:
            _checked_path(sub, fields, "dir")
        source = PackageSource(dir=sub)
    elif kind == "local":
        tree_files = fields.get("tree_files", int, required=False)
        tree_bytes = fields.get("tree_bytes", int, required=False)
        for key, value in (("tree_files", tree_files), ("tree_bytes", tree_bytes)):
            if value is not None and value < 0:
                raise fields.fail(key, "must be >= 0")
        source = LocalSource(
            path=fields.get("path", str, required=True),
            tree_sha256=fields.pattern("tree_sha256", HEX64, "64 lowercase hex", required=False),
            tree_files=tree_files,
            tree_bytes=tree_bytes,
        )
    else:
        raise fields.fail("type", f"must be github, hf, package or local, got {kind!r}")
    fields.done()
    return source


def _checked_path(rel: str, fields: _Fields, name: str) -> None:
    try:
        check_relpath(rel)
    except UnsafePathError as exc:
        raise fields.fail(name, str(exc)) from None


def _parse_file(raw: Any, file: str, row: int, source: Source) -> LockedFile:
    plain = _plain_file(raw, source)
    if plain is not None:
        return plain
    fields = _Fields(raw, file, row, "file.")
    fields.only(*(f.name for f in dataclasses.fields(LockedFile)))
    path = fields.get("path", str, required=True)
    _checked_path(path, fields, "path")
    sha = fields.pattern("sha256", HEX64, "64 lowercase hex", required=False)
    size = fields.get("size", int, required=False)
    if size is not None and size < 0:
        raise fields.fail("size", "must be >= 0")
    lfs = fields.get("lfs", bool, required=isinstance(source, GithubSource))
    if lfs is not None and not isinstance(source, GithubSource):
        raise fields.fail("lfs", "only applies to github sources")
    extract = fields.pattern("extract", IDENT, "a Python identifier", required=False)
    extract_sha = fields.pattern("extract_sha256", HEX64, "64 lowercase hex", required=False)
    if (extract is None) != (extract_sha is None):
        raise fields.fail("extract_sha256", "extract and extract_sha256 go together")
    pinned_by = fields.get("pinned_by", str, required=False)
    if pinned_by is not None and pinned_by != FIRST_DOWNLOAD:
        raise fields.fail("pinned_by", f"must be {FIRST_DOWNLOAD!r}, got {pinned_by!r}")
    pinned_at = fields.get("pinned_at", dt.date, required=False)
    if isinstance(pinned_at, dt.datetime):
        raise fields.fail("pinned_at", "must be a date (YYYY-MM-DD), not a date-time")
    if sha is None or size is None:
        if pinned_by != FIRST_DOWNLOAD:
            missing = "sha256" if sha is None else "size"
            raise fields.fail(missing, f'is required unless pinned_by = "{FIRST_DOWNLOAD}"')
        if pinned_at is not None:
            raise fields.fail("pinned_at", "set without a recorded sha256 and size")
    elif pinned_by == FIRST_DOWNLOAD and pinned_at is None:
        raise fields.fail("pinned_at", "a recorded first-download pin needs its date")
    if pinned_at is not None and pinned_by is None:
        raise fields.fail("pinned_at", f'needs pinned_by = "{FIRST_DOWNLOAD}"')
    fields.done()
    return LockedFile(path, sha, size, lfs, extract, extract_sha, pinned_by, pinned_at)


def _plain_file(raw: Any, source: Source) -> LockedFile | None:
    """The entry of a table holding exactly a valid path, sha256 and size (what
    ``lock`` writes), without the general checks' per-key work; None otherwise
    (``_parse_file`` then checks it, and names what is wrong)."""
    if type(raw) is not dict or len(raw) != 3 or isinstance(source, GithubSource):
        return None
    path, sha, size = raw.get("path"), raw.get("sha256"), raw.get("size")
    if (type(path) is not str or type(sha) is not str or type(size) is not int
            or size < 0 or not HEX64.fullmatch(sha)):
        return None
    try:
        check_relpath(path)
    except UnsafePathError:
        return None
    return LockedFile(path, sha, size)


def parse_lock(data: Any, file: str, header: str = "", path: Path | None = None) -> Lock:
    """Build a Lock from parsed TOML; ``file`` names the source in error messages."""
    top = _Fields(data, file, None, "")
    top.only("name", "kind", "description", "source", "file")
    name = top.pattern("name", NAME, "lowercase [a-z0-9._-], starting alphanumeric", required=True)
    kind = top.get("kind", str, required=True)
    if kind not in KINDS:
        raise top.fail("kind", f"must be one of {list(KINDS)}, got {kind!r}")
    description = top.get("description", str, required=False)
    source = _parse_source(top.get("source", dict, required=True), file)
    raw_files = top.get("file", list, required=True)
    top.done()
    if not raw_files:
        raise LockError("a lock needs at least one [[file]]", file=file, field="file")
    files = tuple(_parse_file(raw, file, i, source) for i, raw in enumerate(raw_files))
    seen: set[str] = set()
    for i, entry in enumerate(files):
        if entry.path in seen:
            raise LockError(f"duplicate path {entry.path!r}", file=file, row=i, field="file.path")
        seen.add(entry.path)
    for i, entry in enumerate(files):
        parts = entry.path.split("/")
        for cut in range(1, len(parts)):
            if "/".join(parts[:cut]) in seen:
                raise LockError(
                    f"{entry.path!r} lies below another file entry",
                    file=file,
                    row=i,
                    field="file.path",
                )
    return Lock(name, kind, source, files, description, header, path)


def _header(text: str) -> str:
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("#") or (not line.strip() and lines):
            lines.append(line)
        else:
            break
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""


def load_lock(path: str | os.PathLike[str]) -> Lock:
    """Read and validate a lock file; LockError (an InputError) names file and field."""
    lock_path = Path(path)
    data, text = read_lock_toml(lock_path)
    expect_kind(data, "lock", file=str(lock_path), error=LockError)
    return parse_lock(data, str(lock_path), _header(text), lock_path.resolve())


def _drop_none(items: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in items.items() if value is not None}


def dump_lock(lock: Lock) -> str:
    """The TOML text of a lock (header comments first)."""
    source = _drop_none(dataclasses.asdict(lock.source))
    source = {"type": source.pop("type"), **source}
    if isinstance(lock.source, HfSource) and lock.source.repo_type == "model":
        source.pop("repo_type")
    body: dict[str, Any] = {"name": lock.name, "kind": lock.kind}
    if lock.description is not None:
        body["description"] = lock.description
    # one [[file]] table per entry (tomli_w would inline short tables): readable diffs
    chunks = [tomli_w.dumps(body), "[source]\n" + tomli_w.dumps(source)]
    for entry in lock.files:
        chunks.append("[[file]]\n" + tomli_w.dumps(_drop_none(dataclasses.asdict(entry))))
    text = "\n".join(chunks)
    header = _header(lock.header)
    if header != lock.header.rstrip() + "\n" and lock.header.strip():
        raise LockError(f"lock {lock.name!r}: header lines must all be '#' comments")
    return (header + "\n" if header else "") + text


def save_lock(lock: Lock, path: str | os.PathLike[str] | None = None) -> Path:
    """Write ``lock`` atomically to ``path`` (default: where it was loaded from)."""
    target = Path(path) if path is not None else lock.path
    if target is None:
        raise LockError(f"lock {lock.name!r} has no path to save to")
    text = dump_lock(lock)
    again = parse_lock(tomllib.loads(text), str(target), _header(text), lock.path)
    if again != dataclasses.replace(lock, header=_header(lock.header)):
        raise LockError("internal error: lock does not round-trip", file=str(target))
    atomic_write_bytes(target, text.encode("utf-8"))
    return target


# --- writing a lock for a checkpoint ------------------------------------------------


def _walk_files(directory: Path) -> list[Path]:
    """Regular files below ``directory`` (sorted); a symlink is an ``UnsafePathError``."""
    out = []
    for path in sorted(directory.rglob("*")):
        if path.is_symlink():
            raise UnsafePathError(f"{path}: symbolic links are not locked")
        if path.is_file():
            out.append(path)
    return out


def directory_lock(directory: str | os.PathLike[str], name: str, lock_path: Path, *,
                   description: str | None = None, header: str = "",
                   progress: bool = False) -> Lock:
    """A ``kind = "checkpoint"``, ``type = "local"`` lock pinning every file of
    ``directory`` by sha256 and size (its absolute path, so moving the lock
    file breaks nothing); ``progress``: a bar on stderr of the bytes hashed."""
    from guardrepro.progress import progress_bar

    root = Path(directory).resolve()
    if not root.is_dir():
        raise LockError(f"{root}: not a directory")
    if not NAME.match(name):
        raise LockError(f"lock name {name!r} must match {NAME.pattern}", field="name")
    entries = []
    files = _walk_files(root)
    with progress_bar(sum(path.stat().st_size for path in files), f"lock {name}", "B",
                      enabled=progress, leave=False) as bar:
        for path in files:
            rel = path.relative_to(root).as_posix()
            if lone_surrogate_field(rel) is not None:  # undecodable bytes, surrogate-escaped
                raise LockError(f"{root}: the file name {os.fsencode(rel)!r} is not UTF-8;"
                                " a lock records UTF-8 paths only (rename the file)")
            check_relpath(rel)
            digest, size = sha256_file(path, bar.update)
            entries.append(LockedFile(path=rel, sha256=digest, size=size))
    if not entries:
        raise LockError(f"{root}: no files to lock")
    # absolute: the lock stays valid wherever the lock file is moved or copied
    return Lock(name=name, kind="checkpoint", source=LocalSource(path=str(root)),
                files=tuple(entries), description=description, header=header, path=lock_path)


def hub_lock(repo: str, revision: str, paths: list[str], name: str, lock_path: Path, *,
             description: str | None = None, header: str = "") -> Lock:
    """A checkpoint lock on a Hub repo at a 40-hex revision whose files are all
    pending: each sha256 is recorded at its first verified download."""
    if not HEX40.match(revision):
        raise LockError(f"revision {revision!r} must be a 40-hex commit", field="revision")
    if not NAME.match(name):
        raise LockError(f"lock name {name!r} must match {NAME.pattern}", field="name")
    if not paths:
        raise LockError(f"{repo}@{revision}: no files to lock")
    files = tuple(LockedFile(path=p, pinned_by=FIRST_DOWNLOAD) for p in sorted(paths))
    return Lock(name=name, kind="checkpoint", source=HfSource(repo=repo, revision=revision),
                files=files, description=description, header=header, path=lock_path)
