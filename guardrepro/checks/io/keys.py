"""The comparison key a figure was measured under.

Input: what a figure was computed from: a run's manifest (its provenance: guard
and parser version, checkpoint tree hash, backend and its dtype or
quantization, decoding; its cohort's sha256), the benchmark, the label mode
and the view. Output: a ``ComparisonKey`` written beside each row of
``table``, ``guard-table`` and ``frontier``, and ``key_note``: the line those
verbs print saying which parts of the key their rows share and which differ.

Invariants: a part that is not known (a predictions file has no provenance, a
released log no checkpoint) is None, shown as "—", never guessed; two figures
are measured under one key only when every part is equal. The guard is named
twice: its name and parser version (``toy-guard ts-guard-parser-v2.1``, from the
provenance) and the sha256 of its spec file (from the manifest's ``guard_spec``;
None for a run made before guards were declared in specs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from guardrepro.checks.core.serde import JsonValue

if TYPE_CHECKING:
    from guardrepro.rundir.manifest import RunManifest
    from guardrepro.schema import Provenance

MISSING_MARK = "—"  # how every missing figure and key part is shown


@dataclass(frozen=True)
class ComparisonKey(JsonValue):
    """Everything a figure depends on besides the rows' own answers."""

    benchmark: str | None
    data_sha256: str | None  # the cohort (or split) the rows come from
    label_mode: str | None  # strict | loose | exact
    view: str | None  # fail_closed | upstream
    guard: str | None  # guard name and parser version
    guard_spec: str | None  # the sha256 of the guard's spec file (the run's manifest)
    checkpoint: str | None  # the artifact tree sha256 the run verified
    backend: str | None
    dtype: str | None  # the backend's dtype, or its quantization
    decoding: Mapping[str, Any] | None

    def part(self, name: str) -> str:
        """Part ``name`` as printed: hashes cut to 12 digits, None as "—"."""
        value = getattr(self, name)
        if value is None:
            return MISSING_MARK
        if name == "decoding":
            return decoding_text(value)
        if name in ("data_sha256", "guard_spec", "checkpoint") and len(str(value)) == 64:
            return str(value)[:12]
        return str(value)


KEY_PARTS = tuple(f.name for f in fields(ComparisonKey))


def decoding_text(decoding: Mapping[str, Any]) -> str:
    """``greedy 256`` or ``sampled 2048 T=0.1 top_p=0.9 x3 seed 0``."""
    text = " ".join(str(decoding[k]) for k in ("mode", "max_new_tokens")
                    if decoding.get(k) is not None)
    if decoding.get("mode") == "sampled":
        text += (f" T={decoding.get('temperature')} top_p={decoding.get('top_p')}"
                 f" x{decoding.get('max_attempts')}")
    if decoding.get("seed") is not None:
        text += f" seed {decoding.get('seed')}"
    return text


def _dtype(config: Mapping[str, Any]) -> str | None:
    if isinstance(config.get("dtype"), str):
        return str(config["dtype"])
    quant = config.get("quantization")
    if isinstance(quant, Mapping):
        return (f"q{quant.get('bits')} g{quant.get('group_size')}"
                + (f" {quant['mode']}" if quant.get("mode") else ""))
    return None


def run_key(provenance: Provenance | None, *, benchmark: str | None,
            data_sha256: str | None, label_mode: str, view: str,
            guard_spec: Mapping[str, Any] | None = None) -> ComparisonKey:
    """The key of a figure computed from a run with ``provenance`` (None: a
    source without one, such as a predictions file) and the guard spec its
    manifest records (``RunManifest.guard_spec``; None for runs made before)."""
    if provenance is None:
        return ComparisonKey(benchmark, data_sha256, label_mode, view, None, None, None, None,
                             None, None)
    checkpoint = provenance.artifact_tree_sha256
    spec_sha = None if guard_spec is None else guard_spec.get("sha256")
    return ComparisonKey(
        benchmark=benchmark, data_sha256=data_sha256, label_mode=label_mode, view=view,
        guard=f"{provenance.guard} {provenance.parser_version}",
        guard_spec=spec_sha if isinstance(spec_sha, str) else None,
        checkpoint=None if checkpoint in ("", "none") else checkpoint,
        backend=provenance.backend, dtype=_dtype(provenance.backend_config),
        decoding=dict(provenance.decoding))


def manifest_key(manifest: RunManifest | None, provenance: Provenance, *, benchmark: str | None,
                 label_mode: str, view: str) -> ComparisonKey:
    """``run_key`` of a run read with its manifest (its cohort's sha256 and guard
    spec), or without one (a bare records file: its records' ``provenance``)."""
    if manifest is None:
        return run_key(provenance, benchmark=benchmark, data_sha256=None,
                       label_mode=label_mode, view=view)
    return run_key(manifest.provenance, benchmark=benchmark,
                   data_sha256=manifest.cohort.get("sha256"), label_mode=label_mode,
                   view=view, guard_spec=manifest.guard_spec)


def differing_parts(keys: Sequence[ComparisonKey]) -> list[str]:
    """The parts on which ``keys`` are not all equal (a missing part differs
    from a known one)."""
    return [name for name in KEY_PARTS
            if len({repr(getattr(k, name)) for k in keys}) > 1]


def key_note(keys: Sequence[ComparisonKey], compared: Sequence[str] = ()) -> str:
    """One line: the parts every row shares, then those that differ. Parts in
    ``compared`` are what the output sets side by side (the guards of a guard
    table); any other part that differs means the figures were not measured
    under one key, and the line says so."""
    differ = differing_parts(keys)
    shared = [f"{name} {keys[0].part(name)}" for name in KEY_PARTS if name not in differ]
    line = "key: " + (", ".join(shared) if shared else "nothing shared")
    others = [name for name in differ if name not in compared]
    if [name for name in differ if name in compared]:
        line += "; compared: " + ", ".join(n for n in differ if n in compared)
    if others:
        line += ("; NOT ONE KEY: the rows also differ in " + ", ".join(others)
                 + ", so figures measured under different keys stand side by side here")
    return line
