"""Each guard's declared decision labels and the score each label gives an output."""

from __future__ import annotations

import pytest

from guardrepro.guards.base import check_decision_labels
from guardrepro.guards.registry import adapter_info, decision_labels, get_guard
from guardrepro.guards.spec import shipped_names
from guardrepro.guards.ts_guard.parser import parse_ts_guard

MODEL_GUARDS = [n for n in shipped_names() if adapter_info(n).needs_model]


@pytest.mark.parametrize("name", MODEL_GUARDS)
def test_model_guards_declare_valid_labels(name: str) -> None:
    labels = decision_labels(name)
    assert check_decision_labels(labels, what=name) == dict(labels)


def test_rule_guards_declare_none() -> None:
    assert all(not decision_labels(n) for n in shipped_names() if not adapter_info(n).needs_model)


def test_declared_labels_by_guard() -> None:
    assert dict(decision_labels("llama-guard-3")) == {"safe": 0.0, "unsafe": 1.0}
    assert dict(decision_labels("qwen3guard")) == {"Safe": 0.0, "Controversial": 0.5,
                                                   "Unsafe": 1.0}
    assert dict(decision_labels("shieldgemma")) == {"Yes": 1.0, "No": 0.0}
    assert dict(decision_labels("toy-guard")) == {"0.0": 0.0, "0.5": 0.5, "1.0": 1.0}


@pytest.mark.parametrize("bad", [{"safe": 0.0}, {"a": 0.0, "b": 0.0}, {"a": 0.0, "b": 0.3},
                                 {"a": 0.0, " b": 1.0}, {"a": 0.0, "b": True}])
def test_check_rejects(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="decision label"):
        check_decision_labels(bad, what="spec")


def _ts_text(mal: str, att: str, rating: str) -> str:
    return (f"<Malicious_User_Request>{mal}<\\Malicious_User_Request>\n"
            f"<Being_Attacked>{att}<\\Being_Attacked>\n"
            f"<Harmfulness_Rating>{rating}<\\Harmfulness_Rating>")


@pytest.mark.parametrize("mal,att", [("no", "no"), ("yes", "no"), ("no", "yes"),
                                     ("yes", "yes")])
def test_ts_label_scores_are_the_parser_composite(mal: str, att: str) -> None:
    """Each rating label's score is what the parser gives the same output with
    that rating written in (a second path through the parser)."""
    guard = get_guard("toy-guard", template=_template())
    text = _ts_text(mal, att, "1.0")
    scores = guard.label_scores(text[: guard.decision_char_offset(text)])
    for label in ("0.0", "0.5", "1.0"):
        assert scores[label] == parse_ts_guard(_ts_text(mal, att, label)).score


def _template():  # type: ignore[no-untyped-def]
    from guardrepro.guards.base import GuardTemplate
    return GuardTemplate("x", "0" * 64)
