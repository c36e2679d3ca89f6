"""The user's Hugging Face cache as the store of hub checkpoint files.

Input: an ``hf`` lock source (repo + 40-hex revision) and its file entries; the
cache root comes from the environment at call time, as huggingface_hub reads it:
``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
else ``~/.cache/huggingface/hub``. Offline mode is ``$HF_HUB_OFFLINE`` (1/ON/YES/TRUE).
Output: the path of a locked file's bytes inside the cache (the blob its snapshot
entry points to), or an ``UnsafePathError``; for a snapshot folder given to
``guardrepro lock``, the repo and revision its path shows.

Cache layout (huggingface_hub's)::

    <cache>/<type>s--<org>--<name>/blobs/<id>          the bytes; <id> is the sha256
                                                       of an LFS file, else the git
                                                       blob sha1
    <cache>/<type>s--<org>--<name>/snapshots/<rev>/<path>  a symlink to ../../blobs/<id>

Invariants: a snapshot entry is accepted only when it resolves to a regular file
inside its own repo folder's ``blobs/`` (a regular file inside the snapshot itself,
which huggingface_hub writes where symlinks are unavailable, is accepted too);
any other symlink, a path escaping the snapshot, or a dangling link is refused.
A blob named by a sha256 must hash to that name; one named by a git sha1 must
have that git object id (``blob_identity_problem``).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from guardrepro.artifacts.locks import NAME, HfSource, Lock, LockedFile
from guardrepro.artifacts.paths import fetch_hint
from guardrepro.artifacts.store import CHUNK, check_relpath, open_regular, sha256_file
from guardrepro.errors import IntegrityError, LockError, MissingArtifactError, UnsafePathError
from guardrepro.spec import HEX40, HEX64

TRUE = ("1", "ON", "YES", "TRUE")
REPO_FOLDER = re.compile(r"^(model|dataset|space)s--(.+)$")


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache root, from the environment at call time."""
    explicit = os.environ.get("HF_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    hf_home = os.environ.get("HF_HOME")
    if not hf_home:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        hf_home = os.path.join(xdg, "huggingface")
    return Path(hf_home).expanduser() / "hub"


def offline() -> bool:
    """True when ``$HF_HUB_OFFLINE`` asks for no network."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in TRUE


def repo_folder(source: HfSource, cache: Path | None = None) -> Path:
    """``<cache>/<type>s--<org>--<name>`` for the source's repo."""
    name = f"{source.repo_type}s--" + source.repo.replace("/", "--")
    return (cache or hub_cache_dir()) / name


def snapshot_dir(source: HfSource, cache: Path | None = None) -> Path:
    """The snapshot folder of the pinned revision (it may not exist)."""
    return repo_folder(source, cache) / "snapshots" / source.revision


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_entry(snapshot: Path, rel: str) -> Path | None:
    """The bytes of ``snapshot/rel``: the blob it links to, or the regular file itself.

    None when the entry is absent; UnsafePathError for a symlink that leaves the repo
    folder's ``blobs/``, a dangling link, a symlinked directory or anything that is
    not a regular file. ``snapshot`` is ``<repo folder>/snapshots/<rev>``.
    """
    check_relpath(rel)
    repo = snapshot.parent.parent
    real_repo = Path(os.path.realpath(repo))
    real_snapshot = Path(os.path.realpath(snapshot))
    if real_snapshot != real_repo / "snapshots" / snapshot.name:
        raise UnsafePathError(f"{snapshot}: the snapshot folder leaves its repo folder {repo}")
    entry = snapshot / rel
    if not entry.is_symlink() and not entry.exists():
        return None
    real_parent = Path(os.path.realpath(entry.parent))
    if real_parent != real_snapshot.joinpath(*rel.split("/")[:-1]):
        raise UnsafePathError(f"{entry}: a directory on the way is a symlink")
    target = Path(os.path.realpath(entry))
    if entry.is_symlink():
        blobs = real_repo / "blobs"
        if not _inside(target, blobs) or target.parent != blobs:
            raise UnsafePathError(
                f"{entry}: symlink to {target}, outside the cache's own {blobs} (refused)"
            )
        if not target.exists():
            raise UnsafePathError(f"{entry}: dangling symlink to {target}")
    if target.is_symlink() or not target.is_file():
        raise UnsafePathError(f"{entry}: not a regular file")
    return target


def lock_sources(lock: Lock) -> dict[str, Path]:
    """Where each file of an ``hf`` lock has its bytes in the HF cache (the blob its
    snapshot entry resolves to); MissingArtifactError naming a file not there."""
    assert isinstance(lock.source, HfSource)
    snapshot = snapshot_dir(lock.source)
    out = {}
    for entry in lock.files:
        found = resolve_entry(snapshot, entry.path)
        if found is None:
            raise MissingArtifactError(
                f"lock {lock.name!r}: {entry.path} is not in the HF cache {snapshot};"
                f" {fetch_hint(lock)}"
            )
        out[entry.path] = found
    return out


def git_blob_sha1(path: Path) -> str:
    """The git object id of the file's bytes (the Hub's id of a non-LFS file)."""
    size = os.stat(path).st_size
    digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    with os.fdopen(open_regular(path), "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def blob_identity_problem(blob: Path, sha256: str) -> str | None:
    """Why a blob's bytes (sha256 already computed) do not match its cache name, or None.

    A blob that is not named by a hash (a regular file in the snapshot) has no name to
    check against: None.
    """
    name = blob.name
    if HEX64.fullmatch(name):
        return None if name == sha256 else f"the cache names it sha256 {name}, observed {sha256}"
    if HEX40.fullmatch(name) and blob.parent.name == "blobs":
        sha1 = git_blob_sha1(blob)
        return None if sha1 == name else f"the cache names it git blob {name}, observed {sha1}"
    return None


# What every runner loads from a model checkpoint: its config, the fast tokenizer
# and its config (with the chat template), and safetensors weights.
CHECKPOINT_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


def check_checkpoint_files(paths: list[str], where: str) -> None:
    """LockError naming each file a guard's runner needs that ``paths`` (the
    relative paths of a checkpoint's files) lacks."""
    missing = [name for name in CHECKPOINT_FILES if name not in paths]
    if not any(path.endswith(".safetensors") for path in paths):
        missing.append("*.safetensors (the weights)")
    if missing:
        raise LockError(f"{where}: the checkpoint lacks {', '.join(missing)}, which every "
                        "guard's runner loads; complete the download before locking it")


@dataclass(frozen=True)
class SnapshotPath:
    """What an HF snapshot folder's path says: repo, type, revision, repo folder."""

    repo: str
    repo_type: str
    revision: str
    folder: Path


def parse_snapshot_path(directory: Path) -> SnapshotPath | None:
    """``.../<type>s--<org>--<name>/snapshots/<40 hex>`` -> its parts, else None."""
    revision = directory.name
    repo_dir = directory.parent.parent
    if directory.parent.name != "snapshots" or not HEX40.fullmatch(revision):
        return None
    match = REPO_FOLDER.match(repo_dir.name)
    if match is None:
        return None
    parts = match.group(2).split("--")
    if len(parts) != 2 or not all(parts):
        return None
    return SnapshotPath("/".join(parts), match.group(1), revision, repo_dir)


def snapshot_files(snapshot: Path) -> list[str]:
    """Relative POSIX paths of every entry (file or symlink) below a snapshot folder,
    sorted; a symlinked directory is refused."""
    found = []
    for dirpath, dirnames, filenames in os.walk(snapshot):
        base = Path(dirpath)
        for name in dirnames:
            if (base / name).is_symlink():
                raise UnsafePathError(f"{base / name}: symlinked directory in a snapshot")
        found += [(base / name).relative_to(snapshot).as_posix() for name in filenames]
    return sorted(found)


def snapshot_lock(directory: Path, name: str, lock_path: Path, *,
                  description: str | None = None, header: str = "",
                  progress: bool = False) -> Lock:
    """A ``kind = "checkpoint"`` ``hf`` lock pinning every file of an HF snapshot
    folder (``.../<type>s--<org>--<name>/snapshots/<rev>``) by the sha256 and size
    of the blob each entry resolves to; a link leaving the repo folder's ``blobs/``
    is refused, as is a model snapshot without a file every runner loads
    (``CHECKPOINT_FILES``, safetensors weights). The repo and revision come from
    the path."""
    from guardrepro.progress import progress_iter

    where = parse_snapshot_path(directory)
    if where is None:
        raise LockError(
            f"{directory}: not an HF snapshot folder (.../models--ORG--NAME/snapshots/<40-hex>)"
        )
    if not NAME.match(name):
        raise LockError(f"lock name {name!r} must match {NAME.pattern}", field="name")
    entries = []
    rels = snapshot_files(directory)
    if where.repo_type == "model":
        check_checkpoint_files(rels, str(directory))
    for rel in progress_iter(rels, f"lock {name}", "file", enabled=progress, leave=False):
        target = resolve_entry(directory, rel)
        assert target is not None
        sha, size = sha256_file(target)
        problem = blob_identity_problem(target, sha)
        if problem is not None:
            raise IntegrityError(f"{directory / rel}: {problem}")
        entries.append(LockedFile(path=rel, sha256=sha, size=size))
    if not entries:
        raise LockError(f"{directory}: no files to lock")
    source = HfSource(repo=where.repo, revision=where.revision, repo_type=where.repo_type)
    return Lock(name=name, kind="checkpoint", source=source, files=tuple(entries),
                description=description, header=header, path=lock_path)
