"""Sources and locks for ``guardrepro quantize``.

Input: the ``--model`` argument (a lock file, or a plain directory accepted
only when the caller says ``unpinned``) and, after conversion, the finished
artifact directory.

Output: ``resolve_source`` returns the verified source directory with its
identity (repo, revision, tree hash, lock sha256). ``write_artifact_lock``
writes ``<out>.lock.toml`` beside the artifact, in ``guardrepro.artifacts.locks``'
format with a ``local`` source (path relative to the lock file), so
``guardrepro verify`` checks it like any other artifact, and
``<out>.quantize.json`` with the full provenance (recipe, versions, source,
config normalisation, quantized and non-quantized weights, expected tree
hash and whether it matched). The lock's header comments summarise that
file and pin its sha256.

Invariants: both files are written atomically; the lock round-trips through
``locks.load_lock``; the artifact directory itself is never touched (the
tree hash covers exactly the converted files).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardrepro.artifacts.store import (
    atomic_write_bytes,
    read_hashed,
    sha256_bytes,
    sha256_file,
    walk_files,
)
from guardrepro.errors import InputError

if TYPE_CHECKING:
    from guardrepro.artifacts.quantize.result import QuantizeResult, SourceInfo


def lock_path_for(out: Path) -> Path:
    return out.parent / f"{out.name}.lock.toml"


def provenance_path_for(out: Path) -> Path:
    return out.parent / f"{out.name}.quantize.json"


def resolve_source(model: Path, *, unpinned: bool, home: Path | None,
                   source_cls: type[SourceInfo]) -> SourceInfo:
    """Verify the source: a lock is materialized (hash-checked) by guardrepro.artifacts.fetch;
    a directory is accepted only when ``unpinned`` (its tree hash is recorded)."""
    from guardrepro.artifacts.treehash import cached_tree_hash, tree_hash

    if model.is_dir():
        if not unpinned:
            raise InputError("a plain directory is not a verified source; pass a lock file, "
                             "or --unpinned to accept it as is (recorded in the lock)",
                             file=str(model))
        tree = tree_hash(model)
        return source_cls(directory=model.resolve(), pinned=False, lock_path=None,
                          lock_sha256=None, repo=None, revision=None, tree_sha256=tree.sha256)
    if not model.is_file():
        raise InputError("no such lock file or directory", file=str(model))
    from guardrepro.artifacts.fetch import materialize
    from guardrepro.artifacts.locks import GithubSource, HfSource, load_lock

    lock = load_lock(model)
    directory = Path(materialize(model, home=home))
    repo: str | None = None
    revision: str | None = None
    if isinstance(lock.source, HfSource):
        repo, revision = lock.source.repo, lock.source.revision
    elif isinstance(lock.source, GithubSource):
        repo, revision = lock.source.repo, lock.source.commit
    tree = cached_tree_hash(directory, home)  # materialize just verified it
    lock_sha256 = read_hashed(model)[1]
    return source_cls(directory=directory, pinned=True, lock_path=str(model.resolve()),
                      lock_sha256=lock_sha256, repo=repo or lock.name,
                      revision=revision, tree_sha256=tree.sha256)


def _lock_name(out: Path) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", out.name.lower()).strip("-._")
    return name or "mlx-artifact"


def provenance(result: QuantizeResult) -> dict[str, Any]:
    expected = result.expected
    return {
        "artifact": result.artifact.name,
        "tree_sha256": result.tree_sha256,
        "files": result.files,
        "bytes": result.bytes,
        "recipe": result.recipe.to_dict(),
        "versions": dict(result.versions),
        "source": result.source.to_dict(),
        "config_normalisation": list(result.config_changes),
        "quantized_weights": list(result.quantized),
        "not_quantized_tensors": list(result.not_quantized),
        "expected": None if expected is None else expected.to_dict(),
        "expected_match": result.expected_match,
    }


def write_artifact_lock(result: QuantizeResult, *, files_dir: Path) -> list[Path]:
    """Write ``<out>.quantize.json`` and ``<out>.lock.toml`` for the files now in
    ``files_dir`` (the artifact before its final rename to ``result.artifact``);
    return both paths."""
    from guardrepro.artifacts.locks import LocalSource, Lock, LockedFile, save_lock

    out = result.artifact
    prov_path = provenance_path_for(out)
    prov_bytes = (json.dumps(provenance(result), indent=2, sort_keys=True) + "\n").encode()
    atomic_write_bytes(prov_path, prov_bytes)

    files: list[LockedFile] = []
    for rel, path in walk_files(files_dir):  # sorted; refuses symlinks and specials
        sha, size = sha256_file(path)  # one read gives both
        files.append(LockedFile(path=rel, sha256=sha, size=size))
    if len(files) != result.files or sum(f.size or 0 for f in files) != result.bytes:
        raise InputError("artifact changed while it was being pinned", file=str(files_dir))
    src = result.source
    source_line = (f"{src.repo}@{src.revision}" if src.revision else
                   f"{src.repo or 'unpinned directory'} (tree {src.tree_sha256})")
    expected = result.expected
    match = ("no published tree hash for this source" if expected is None else
             f"{'MATCHES' if result.expected_match else 'DIFFERS FROM'} published "
             f"{expected.tree_sha256} (mlx {expected.mlx}, mlx-lm {expected.mlx_lm})")
    header = "\n".join([
        "# MLX artifact written by `guardrepro quantize`.",
        f"# recipe: {result.recipe.name} (sha256 {result.recipe.sha256})",
        f"# mlx {result.versions['mlx']}, mlx-lm {result.versions['mlx-lm']}",
        f"# source: {source_line}" + ("" if src.pinned else "  [UNPINNED]"),
        f"# quantized weights: {len(result.quantized)}; other tensors: "
        f"{len(result.not_quantized)}",
        f"# expected tree hash: {match}",
        f"# full provenance: {prov_path.name} (sha256 {sha256_bytes(prov_bytes)})",
    ]) + "\n"
    lock_path = result.lock_path
    rel_dir = os.path.relpath(out, lock_path.parent)
    lock = Lock(
        name=_lock_name(out),
        kind="checkpoint",
        source=LocalSource(path=Path(rel_dir).as_posix(), tree_sha256=result.tree_sha256,
                           tree_files=result.files, tree_bytes=result.bytes),
        files=tuple(files),
        description=f"MLX {result.recipe.name} conversion of {src.repo or 'an unpinned dir'}",
        header=header,
        path=lock_path,
    )
    try:
        save_lock(lock, lock_path)
    except BaseException:
        prov_path.unlink(missing_ok=True)
        raise
    return [lock_path, prov_path]
