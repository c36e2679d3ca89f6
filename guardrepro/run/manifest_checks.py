"""A run manifest checks itself on every read.

Input: the JSON object of a ``manifest.json``.
Output: ``check_manifest_types`` (every scalar typed), ``field_digests``
(written into the manifest as ``field_sha256``: each leaf field's dotted name,
``provenance.guard`` or ``run_id``, mapped to the first 16 hex digits of the
sha256 of its canonical JSON) and ``check_manifest``; every reader calls both
through ``RunManifest.from_dict``.

Invariants:

- The provenance is re-hashed on every read and must equal
  ``provenance_sha256``, for manifests of every age.
- A manifest holding ``field_sha256`` (every manifest written since it was
  introduced) must match it leaf by leaf, none missing and none added: an edit
  is an ``InputError`` naming the manifest and the field that changed. These
  digests catch edits, not forgery: whoever rewrites a value and its digest
  alike is caught only by the records' own ``provenance_sha256``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

from guardrepro.errors import InputError
from guardrepro.schema import canonical_json

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
