"""A run directory's ``manifest.json``: written once, checked on every read.

Input: a run's ``RunManifest`` (written by ``run.pipeline`` when the run
starts) or the bytes of a ``manifest.json``.
Output: ``RunManifest`` values, ``manifest.json`` written atomically with its
``field_sha256`` digests, and the checks that a manifest is unedited and that a
resumed run or a merged shard is the same run.

Invariants:

- ``manifest.json`` is written atomically (temporary file in the same
  directory, fsync, ``os.replace``) once, when the run starts; a resumed run
  must present an identical provenance hash, cohort hash and shard.
- The provenance is re-hashed on every read and must equal
  ``provenance_sha256``, for manifests of every age.
- A manifest holding ``field_sha256`` (every manifest written since it was
  introduced: each leaf field's dotted name, ``provenance.guard`` or
  ``run_id``, mapped to the first 16 hex digits of the sha256 of its canonical
  JSON) must match it leaf by leaf, none missing and none added: an edit is an
  ``InputError`` naming the manifest and the field that changed. These digests
  catch edits, not forgery: whoever rewrites a value and its digest alike is
  caught only by the records' own ``provenance_sha256``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import atomic_write_bytes, read_hashed
from guardrepro.errors import InputError, ProvenanceError
from guardrepro.limits import load_json
from guardrepro.schema import Provenance, Record, canonical_json
from guardrepro.spec import check_keys, type_problem

MANIFEST_FILE = "manifest.json"
DIGESTS_KEY = "field_sha256"


def _leaves(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key in sorted(data, key=str):
        if not prefix and key == DIGESTS_KEY:
            continue
        value = data[key]
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def check_manifest_types(data: Mapping[str, Any], file: str | None) -> None:
    """Every scalar of a manifest has its type: an edited manifest with a row count
    of ``"12x"`` or ``-1`` is an InputError naming the field, not a ValueError later."""
    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    checks: list[tuple[str, Any, bool, str]] = [
        ("cohort.rows", data["cohort"]["rows"], count(data["cohort"]["rows"]),
         "a non-negative integer"),
        ("rows_selected", data["rows_selected"], count(data["rows_selected"]),
         "a non-negative integer"),
        ("shard", data["shard"], data["shard"] is None or isinstance(data["shard"], str),
         "a string or null"),
        ("git_commit", data["git_commit"],
         data["git_commit"] is None or isinstance(data["git_commit"], str), "a string or null"),
        ("guard_spec", data.get("guard_spec"),
         data.get("guard_spec") is None or isinstance(data["guard_spec"], Mapping),
         "an object or null"),
    ]
    for key in ("run_id", "created_at", "provenance_sha256", "guardrepro_version"):
        checks.append((key, data[key], isinstance(data[key], str), "a string"))
    for table in ("cohort", "profile"):
        for key in ("path", "sha256"):
            value = data[table][key]
            checks.append((f"{table}.{key}", value, isinstance(value, str), "a string"))
    for field_name, value, ok, what in checks:
        if not ok:
            raise InputError(f"expected {what}, got {value!r}", file=file, field=field_name)


def field_digests(data: Mapping[str, Any]) -> dict[str, str]:
    """Dotted leaf name -> 16 hex digits of the sha256 of its canonical JSON."""
    return {name: hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:16]
            for name, value in _leaves(data)}


def check_manifest(data: Mapping[str, Any], provenance_sha256: str, *, file: str | None
                   ) -> None:
    """Refuse an edited manifest, naming the field (see the module docstring);
    ``provenance_sha256``: the sha256 its provenance re-hashes to."""
    recorded = data.get(DIGESTS_KEY)
    if recorded is not None:
        if not isinstance(recorded, Mapping) or not all(
                isinstance(v, str) for v in recorded.values()):
            raise InputError("expected an object of digests", file=file, field=DIGESTS_KEY)
        actual = field_digests(data)
        changed = sorted(name for name in set(actual) | set(recorded)
                         if actual.get(name) != recorded.get(name))
        if changed:
            state = ("added" if changed[0] not in recorded else
                     "removed" if changed[0] not in actual else "changed")
            also = f" (also changed: {', '.join(changed[1:4])})" if changed[1:] else ""
            raise InputError(
                f"{state} after the run wrote this manifest: it no longer matches its "
                f"digest in {DIGESTS_KEY}{also}; the manifest cannot be trusted",
                file=file, field=changed[0])
    if provenance_sha256 != data["provenance_sha256"]:
        raise InputError(
            f"changed after the run wrote this manifest: it hashes to "
            f"{provenance_sha256[:12]}..., not to provenance_sha256 "
            f"{str(data['provenance_sha256'])[:12]}...; the manifest cannot be trusted",
            file=file, field="provenance")


@dataclass(frozen=True)
class RunManifest:
    """What ``manifest.json`` holds. ``cohort`` = {path, sha256, rows};
    ``profile`` = {path, sha256 (of the profile's text)}; ``shard`` = "k/n" or None;
    ``provenance`` is the run's ``Provenance`` (its keys read strictly);
    ``rows_selected`` = rows of the cohort in this run (after the shard)."""

    run_id: str
    created_at: str
    provenance: Provenance
    provenance_sha256: str
    cohort: Mapping[str, Any]
    profile: Mapping[str, Any]
    shard: str | None
    rows_selected: int
    guardrepro_version: str
    git_commit: str | None
    # the guard spec, its special tokens and system prompt (``run.guard_facts``)
    guard_spec: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Any, *, file: str | None = None) -> RunManifest:
        if not isinstance(data, Mapping):
            raise InputError("manifest must be a JSON object", file=file)
        names = [f.name for f in fields(cls)]
        check_keys(data, [*names, DIGESTS_KEY], file=file,
                   required=[n for n in names if n != "guard_spec"])
        for key, sub in (("cohort", ("path", "sha256", "rows")), ("profile", ("path", "sha256"))):
            if not isinstance(data[key], Mapping):
                raise InputError(type_problem(data[key], dict), file=file, field=key)
            check_keys(data[key], sub, file=file, where=key, required=sub)
        check_manifest_types(data, file)
        values: dict[str, Any] = {name: data.get(name) for name in names}
        values["provenance"] = Provenance.from_dict(data["provenance"], file=file,
                                                    where="provenance")
        check_manifest(data, values["provenance"].sha256, file=file)  # re-hashed: no edit
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        if out["guard_spec"] is None:
            del out["guard_spec"]
        return out

    def differences(self, other: RunManifest) -> list[str]:
        """Human-readable list of what makes ``other`` a different run than this one."""
        diffs: list[str] = []
        if self.provenance_sha256 != other.provenance_sha256:
            diffs.extend(provenance_differences(self.provenance.to_dict(),
                                                other.provenance.to_dict()))
            if not diffs:  # same keys and values but different hash: report the hash itself
                diffs.append("provenance_sha256")
        if self.cohort["sha256"] != other.cohort["sha256"]:
            diffs.append(
                f"cohort.sha256: {self.cohort['sha256'][:12]}... ({self.cohort['path']}) != "
                f"{other.cohort['sha256'][:12]}... ({other.cohort['path']})"
            )
        if self.shard != other.shard:
            diffs.append(f"shard: {self.shard!r} != {other.shard!r}")
        mine, theirs = ((m.guard_spec or {}).get("sha256") for m in (self, other))
        if mine and theirs and mine != theirs:
            diffs.append(f"guard_spec.sha256: {mine[:12]}... != {theirs[:12]}...")
        return diffs


def provenance_differences(old: Any, new: Any, prefix: str = "provenance") -> list[str]:
    """Every leaf key whose value differs, as ``"key: old != new"``."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            where = f"{prefix}.{key}"
            if key not in old:
                out.append(f"{where}: absent != {new[key]!r}")
            elif key not in new:
                out.append(f"{where}: {old[key]!r} != absent")
            else:
                out.extend(provenance_differences(old[key], new[key], where))
        return out
    return [] if old == new else [f"{prefix}: {old!r} != {new!r}"]


def check_one_provenance(records: Sequence[Record], manifest: RunManifest, records_path: Path,
                         *, refusing: str) -> None:
    """``ProvenanceError`` naming the first record whose provenance hash is not
    its run manifest's; ``refusing`` says what is refused ("merge", ...)."""
    for index, record in enumerate(records):
        if record.provenance_sha256 != manifest.provenance_sha256:
            raise mixed_provenance(records_path, index, record.row_id, record.provenance_sha256,
                                   manifest, refusing=refusing)


def mixed_provenance(records_path: Path, index: int, row_id: str, provenance_sha256: str,
                     manifest: RunManifest, *, refusing: str) -> ProvenanceError:
    """The error for the record ``row_id`` (0-based line ``index``) whose provenance
    hash is not its run manifest's; ``refusing`` says what is refused."""
    return ProvenanceError(
        f"{records_path}: line {index + 1} ({row_id!r}) has provenance "
        f"{provenance_sha256[:12]}..., its run's manifest "
        f"{manifest.provenance_sha256[:12]}...; refusing to {refusing} mixed provenance")


def read_manifest(run_dir: str | Path) -> RunManifest | None:
    """The run directory's manifest, or None when it has none yet."""
    path = Path(run_dir) / MANIFEST_FILE
    if not path.exists():
        return None
    return parse_manifest(path.read_bytes(), file=str(path))


def parse_manifest(data: bytes, *, file: str) -> RunManifest:
    """A manifest from the bytes of ``file`` (not UTF-8, not JSON or not a
    manifest: ``InputError`` naming the file)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc}", file=file) from exc
    return RunManifest.from_dict(load_json(text, file=file), file=file)


def write_manifest(run_dir: str | Path, manifest: RunManifest, *, trusted: Path | None = None
                   ) -> Path:
    """Write the manifest atomically (no symlink below ``trusted`` followed)."""
    path = Path(run_dir) / MANIFEST_FILE
    data = manifest.to_dict()
    data[DIGESTS_KEY] = field_digests(data)  # every later read checks them
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"), trusted=trusted)
    return path


def check_resumable(existing: RunManifest, new: RunManifest, run_dir: str | Path) -> None:
    """Raise ProvenanceError naming every difference when ``new`` may not resume ``existing``."""
    diffs = existing.differences(new)
    if diffs:
        listing = "\n  ".join(diffs)
        raise ProvenanceError(
            f"{run_dir} already holds run {existing.run_id!r} with different provenance; "
            f"refusing to mix records. Differences (existing != requested):\n  {listing}\n"
            "Use a new --out directory for the new configuration."
        )


def load_manifest_hashed(run_dir: str | Path) -> tuple[RunManifest, str]:
    """The run directory's manifest and the sha256 of the bytes parsed (one read)."""
    path = Path(run_dir) / MANIFEST_FILE
    if not path.is_file():
        raise InputError("manifest.json not found in run directory", file=str(path))
    data, digest = read_hashed(path)
    return parse_manifest(data, file=str(path)), digest
