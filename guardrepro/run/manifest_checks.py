"""A run manifest checks itself on every read.

Input: the JSON object of a ``manifest.json``.
Output: ``check_manifest_types`` (every scalar typed), called by every reader
through ``RunManifest.from_dict``.

Invariants: an edited manifest with a row count of ``"12x"`` or ``-1`` is an
``InputError`` naming the file and field, never a ValueError later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guardrepro.errors import InputError


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
