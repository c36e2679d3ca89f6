"""What a run records about its guard: the spec, the special tokens, the system prompt.

Input: the run's resolved profile (its guard adapter, built from a guard spec,
and its prompt tokenizer) and the run's first cohort row. Output: the
manifest's ``guard_spec`` object:

- ``name``, ``origin`` (shipped, local or path), ``path`` and ``sha256`` (of
  the spec file's bytes);
- ``special_tokens``: the EOS ids and the pad id the run used, each with the
  token string it names and the file it was read from, and whether the spec
  pins them (``pinned_by_spec``; otherwise they are the checkpoint's own);
- ``default_system_prompt``: the spec's policy and the text the chat
  template inserted on its own (None: nothing inserted).

A guard without a spec (an adapter built by hand) or without a tokenizer (a
rule guard) records what applies and None for the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _token(tokenizer: Any, token_id: int | None) -> dict[str, Any]:
    name = tokenizer.token_name(token_id) if hasattr(tokenizer, "token_name") else None
    return {"id": token_id, "token": name}


def _tokens(tokenizer: Any, guard: Any) -> dict[str, Any] | None:
    eos = sorted(set(getattr(tokenizer, "eos_token_ids", []) or []))
    if not eos:
        return None
    expected = guard.special_tokens
    pinned = bool(expected.eos or expected.pad or expected.upstream_eos_ids is not None
                  or expected.upstream_pad_id is not None)
    return {"eos": [_token(tokenizer, i) for i in eos],
            "eos_source": Path(str(getattr(tokenizer, "eos_source", ""))).name,
            "pad": _token(tokenizer, tokenizer.pad_token_id),
            "pad_source": Path(str(getattr(tokenizer, "pad_source", ""))).name,
            "pinned_by_spec": pinned}


def guard_facts(resolved: Any, rows: Sequence[Any]) -> dict[str, Any]:
    """The manifest's ``guard_spec`` object (module docstring) of a resolved
    profile (``run.resolve.ResolvedProfile``); the system prompt is looked for
    in the first of ``rows`` (cohort rows)."""
    guard, tokenizer = resolved.guard, resolved.tokenizer
    spec = getattr(guard, "spec", None)
    inserted = None
    if rows and hasattr(tokenizer, "injected_system_prompt"):
        inserted = tokenizer.injected_system_prompt(guard.messages(rows[0].sample))
    policy = getattr(guard, "system_prompt", None)
    return {"name": guard.name,
            "origin": None if spec is None else spec.origin,
            "path": None if spec is None else str(spec.path),
            "sha256": None if spec is None else spec.sha256,
            "special_tokens": _tokens(tokenizer, guard),
            "default_system_prompt": {"policy": policy, "inserted": inserted}}
