"""``guardrepro lock``: write a checkpoint lock for a local directory or a Hub repo.

Input: a local checkpoint directory (``DIR``), or ``--hub REPO --revision
SHA`` (the file list comes from ``huggingface_hub``'s tree listing at that
revision, honouring ``HF_ENDPOINT``). ``--out`` is the lock to write
(refused when it exists, unless ``--force``); ``--name`` defaults to the
file's stem. ``--guard NAME`` (local directories) checks, before writing,
that the checkpoint's own config declares the adapter's special tokens and
records in the lock's header what was read: the EOS and pad ids and the
token strings they name, and the chat template's sha256.

An HF snapshot folder (``.../models--ORG--NAME/snapshots/<rev>`` in a Hugging
Face cache) gives an ``hf`` lock on that repo and revision, every file pinned by
the bytes of the blob its symlink points to; a link leaving the repo folder's
own ``blobs/`` is refused, as is any other symlink.

Output: the lock file (atomic write), and on stdout its path and file count.
A local lock pins every file by sha256 and size; a hub lock lists the files
as pending (``pinned_by = "first-download"``): ``guardrepro fetch`` records
each sha256 at its first verified download and refuses a later change.
``--progress`` (the default) draws a bar of the bytes hashed (local
directories) on stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from guardrepro.cli.options import PROGRESS_OPTION, echo

if TYPE_CHECKING:
    from guardrepro.artifacts.hf_cache import SnapshotPath


def _guard_header(directory: Path, guard: str) -> list[str]:
    from guardrepro.errors import PromptError
    from guardrepro.guards.registry import expected_tokens
    from guardrepro.guards.spec import find_spec
    from guardrepro.run.prompts import PromptTokenizer

    spec = find_spec(guard)
    tok = PromptTokenizer(directory)
    tok.check_special_tokens(expected_tokens(guard), guard=spec.name, spec=str(spec.path))
    eos = ", ".join(f"{i} {tok.token_name(i)}" for i in sorted(set(tok.eos_token_ids)))
    if not eos:
        raise PromptError(f"{directory}: no EOS ids")
    return [
        f"# guard {spec.name}: special tokens read from the checkpoint at lock time:",
        f"#   eos {eos} ({Path(tok.eos_source).name})",
        f"#   pad {tok.pad_token_id} {tok.token_name(tok.pad_token_id)} "
        f"({Path(tok.pad_source).name})",
        f"#   chat template sha256 {tok.chat_template_sha256}",
        f"#   guard spec {spec.path} (sha256 {spec.sha256})",
    ]


def _check_files(directory: Path, snapshot: bool) -> None:
    """Before the tokenizer is loaded: every file a guard's runner needs is there."""
    from guardrepro.artifacts.hf_cache import check_checkpoint_files, snapshot_files
    from guardrepro.artifacts.store import walk_files

    rels = snapshot_files(directory) if snapshot else [rel for rel, _ in walk_files(directory)]
    check_checkpoint_files(rels, str(directory))


def _hub_paths(repo: str, revision: str) -> list[str]:
    from guardrepro.errors import FetchError

    try:
        from huggingface_hub import HfApi
    except ImportError as exc:
        from guardrepro.errors import missing_extra

        raise missing_extra("--hub", "huggingface_hub", "hf") from exc
    try:
        items = HfApi().list_repo_tree(repo, revision=revision, recursive=True)
        return [item.path for item in items if type(item).__name__ == "RepoFile"]
    except Exception as exc:  # httpx / huggingface_hub errors: no common base class
        raise FetchError(f"{repo}@{revision}: cannot list the files: {exc}") from exc


def _note_cache(snapshot: SnapshotPath) -> None:
    """Say so when the snapshot is not in the HF cache fetch and run will read."""
    from guardrepro.artifacts.hf_cache import hub_cache_dir

    root = snapshot.folder.parent
    if root.resolve() != hub_cache_dir().resolve():
        echo(f"note: {root} is not the HF cache of this environment ({hub_cache_dir()});"
             f" set HF_HUB_CACHE={root} for fetch, verify and run", err=True)


@click.command("lock", short_help="Write a checkpoint lock (local directory or Hub).")
@click.argument("directory", required=False,
                type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The lock file to write (e.g. locks/NAME.toml).")
@click.option("--name", default=None, help="Lock name (default: the --out file's stem).")
@click.option("--hub", "hub", default=None, metavar="REPO", help="A Hub repo instead of DIR.")
@click.option("--revision", default=None, help="With --hub: the 40-hex commit to pin.")
@click.option("--guard", default=None, help="Check and record the guard's special tokens.")
@click.option("--description", default=None)
@click.option("--force", is_flag=True, help="Overwrite an existing lock file.")
@PROGRESS_OPTION
def lock(directory: Path | None, out: Path, name: str | None, hub: str | None,
         revision: str | None, guard: str | None, description: str | None,
         force: bool, progress: bool) -> None:
    """Write a checkpoint lock for DIR, or for --hub REPO --revision SHA."""
    from guardrepro.artifacts.hf_cache import parse_snapshot_path, snapshot_lock
    from guardrepro.artifacts.locks import directory_lock, hub_lock, save_lock
    from guardrepro.errors import InputError

    if (directory is None) == (hub is None):
        raise InputError("give exactly one of DIR or --hub REPO", field="directory")
    if out.exists() and not force:
        raise InputError("lock file exists (use --force to overwrite)", file=str(out))
    name = name or out.stem
    if hub is not None:
        from guardrepro.spec import HEX40

        if revision is None or not HEX40.match(revision):
            raise InputError(f"--hub needs --revision as a 40-hex commit, got {revision!r}",
                             field="revision")
        header = [f"# {hub} at {revision}: file list from the Hub; every sha256 is recorded",
                  "# at its first verified download (`guardrepro fetch`)."]
        result = hub_lock(hub, revision, _hub_paths(hub, revision), name, out,
                          description=description, header="\n".join(header) + "\n")
    else:
        assert directory is not None
        snapshot = parse_snapshot_path(directory.absolute())
        kind = "HF snapshot" if snapshot else "local checkpoint"
        header = [f"# {kind} {directory.absolute()}, locked by `guardrepro lock`"]
        if guard is not None:
            _check_files(directory, snapshot is not None)
            header += _guard_header(directory, guard)
        if snapshot is not None:
            _note_cache(snapshot)
            result = snapshot_lock(directory.absolute(), name, out, description=description,
                                   header="\n".join(header) + "\n", progress=progress)
        else:
            result = directory_lock(directory, name, out, description=description,
                                    header="\n".join(header) + "\n", progress=progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_lock(result, out)
    echo(f"{out}: {len(result.files)} files "
         f"({'pending first download' if hub else 'pinned'})")
