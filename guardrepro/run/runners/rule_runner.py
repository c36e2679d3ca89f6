"""The ``rule`` backend: evaluates a rule guard's rendered input, no model.

Input: requests whose ``prompt_text`` is a ``guards.rule.rules.render_rule_input``
rendering (JSON naming the rule and its inputs). Output: one ``Generation``
per request whose text is ``guards.rule.evaluate_rule``'s output; no token
ids, no margins; ``timings.total_s`` is the measured seconds of the rule
itself (prefill and decode 0) and ``peak_memory_bytes`` 0 (no weights).
Options: ``lookup_table`` (path of a ``guards.rule.lookup`` table, needed
by ``rule-tool-lookup``) and ``batch_size``. The table's sha256 goes into
``describe()`` (provenance).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InferenceError
from guardrepro.run.runners.backends import RULE
from guardrepro.run.runners.base import Generation, GenerationRequest, Timings


class RuleRunner:
    backend = RULE.name

    def __init__(self, checkpoint_dir: Path, options: Mapping[str, Any], *,
                 eos_token_ids: Sequence[int], pad_token_id: int | None,
                 decode: Callable[[Sequence[int]], str]) -> None:
        RULE.options.check(options)
        self.lookup: dict[str, Any] | None = None
        self.lookup_sha256: str | None = None
        path = options.get("lookup_table")
        if path is not None:
            from guardrepro.guards.rule.lookup import load_table_hashed

            self.lookup, self.lookup_sha256 = load_table_hashed(Path(path))  # one read

    def describe(self) -> dict[str, Any]:
        from guardrepro.guards.rule.rules import RULE_VERSION

        return {"backend": self.backend, "rule_version": RULE_VERSION,
                "lookup_table_sha256": self.lookup_sha256}

    def generate(self, requests: Sequence[GenerationRequest],
                 params: DecodingParams) -> list[Generation]:
        from guardrepro.guards.rule.rules import evaluate_rule

        out = []
        for request in requests:
            if request.prompt_text is None:
                raise InferenceError(f"request {request.row_id!r} has no rendered rule input")
            started = time.perf_counter()
            try:
                text = evaluate_rule(request.prompt_text, self.lookup)
            except (ValueError, KeyError) as exc:
                raise InferenceError(f"request {request.row_id!r}: {exc}") from exc
            seconds = time.perf_counter() - started
            out.append(Generation(request.row_id, (), text, "stop", (),
                                  Timings(0.0, 0.0, seconds), peak_memory_bytes=0))
        return out

    def close(self) -> None:
        self.lookup = None
