"""Decision-label probabilities worked out by hand, for the P(unsafe) tests.

A second implementation of docs/PROTOCOL.md section 22 (the decision
position and the renormalisation for every parser kind, the whole
computation for the TS-Guard format), sharing no code with
``guardrepro.guards.decision``: the decision
character is found by a regular expression over the output (the first
non-whitespace character after the first ``<Harmfulness_Rating>``), the
decision position by a linear scan of prefix decodes, each label's
probability by renormalising a full-vocabulary softmax over the labels' first
tokens, and the composite score (section 5) in whole tenths.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

RATING = re.compile(r"<harmfulness_rating>\s*", re.IGNORECASE)
FLAG = r"<{}>\s*(yes|no)\s*<\\+{}>"


def index_by_scan(decode: Callable[[Sequence[int]], str], ids: Sequence[int],
                  offset: int) -> int:
    """The first generated token whose prefix decode reaches past ``offset``."""
    return next(i for i in range(len(ids)) if len(decode(ids[: i + 1])) > offset)


def renorm(probs: Any, step: int, ids: Sequence[int]) -> list[float]:
    """``probs[step, i]`` for ``i`` in ``ids``, rescaled to sum to 1."""
    values = [float(probs[step, i]) for i in ids]
    return [v / sum(values) for v in values]


def ts_offset(text: str) -> int | None:
    """The decision character of a TS-Guard output (None: no rating tag)."""
    match = RATING.search(text)
    return None if match is None or match.end() >= len(text) else match.end()


def ts_flags(text: str) -> tuple[bool, bool]:
    """(malicious_user_request, being_attacked) as written, yes = True."""
    out = []
    for tag in ("Malicious_User_Request", "Being_Attacked"):
        match = re.search(FLAG.format(tag, tag), text, re.IGNORECASE)
        assert match is not None, f"no {tag} flag in {text!r}"
        out.append(match.group(1).lower() == "yes")
    return out[0], out[1]


def ts_score(malicious: bool, attacked: bool, rating: str) -> float:
    """Section 5's score in whole tenths: 4 per flag, 1 for 0.5, 2 for 1.0."""
    tenths = 4 * malicious + 4 * attacked + {"0.0": 0, "0.5": 1, "1.0": 2}[rating]
    return 1.0 if tenths > 5 else 0.5 if tenths == 5 else 0.0


def ts_label_probs(probs: Any, index: int, output: Sequence[int],
                   label_ids: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """Each rating's probability from ``probs`` (rows: generated positions).

    ``0.0`` and ``0.5`` share their first two tokens (``0``, ``.``): their
    split is read two tokens on when the output wrote those two tokens, else
    the shared mass is ``0.0``'s."""
    zero, five = label_ids["0.0"], label_ids["0.5"]
    assert len(zero) == len(five) == 3 and zero[:2] == five[:2] != label_ids["1.0"][:2]
    p0, p1 = renorm(probs, index, [zero[0], label_ids["1.0"][0]])
    if tuple(output[index: index + 2]) == tuple(zero[:2]) and index + 2 < len(output):
        q0, q5 = renorm(probs, index + 2, [zero[2], five[2]])
        return {"0.0": p0 * q0, "0.5": p0 * q5, "1.0": p1}
    return {"0.0": p0, "0.5": 0.0, "1.0": p1}


def ts_expected(text: str, output: Sequence[int], probs: Any,
                decode: Callable[[Sequence[int]], str],
                encode: Callable[[str], Sequence[int]]) -> tuple[dict[str, float], float]:
    """A TS-Guard output's label probabilities and P(unsafe), by hand."""
    offset = ts_offset(text)
    assert offset is not None, f"no rating in {text!r}"
    index = index_by_scan(decode, output, offset)
    labels = {label: tuple(encode(label)) for label in ("0.0", "0.5", "1.0")}
    want = ts_label_probs(probs, index, output, labels)
    malicious, attacked = ts_flags(text)
    return want, sum(p for label, p in want.items()
                     if ts_score(malicious, attacked, label) != 0.0)
