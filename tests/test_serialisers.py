"""Serialisers derived from dataclass fields (``guardrepro.serde``): the bytes
stay those of the hand-written serialisers they replaced, reading is strict,
and the hand-written ones left stay few.

The expected JSON comes from the replaced code itself: ``tests/fixtures/serde``
holds the toy demo's gate.json, stats.json and compare JSON as the hand-written
serialisers wrote them, and ``golden.json`` their output for real objects of
the other converted classes (``tests/serde_objects.py``).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from serde_objects import BUILDERS, FIXTURES, GOLDEN, ROOT, as_json, text

from guardrepro.errors import InputError
from guardrepro.serde.fields import JsonValue, from_json_value, opt

HAND_WRITTEN_LIMIT = 25
NAMES = ("to_json", "from_json", "to_dict", "from_dict")


def hand_written() -> list[str]:
    """``file:line name`` of every serialiser method written by hand in guardrepro/."""
    found = []
    for path in sorted((ROOT / "guardrepro").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in NAMES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return found


def test_hand_written_serialisers_stay_few() -> None:
    found = hand_written()
    assert len(found) <= HAND_WRITTEN_LIMIT, "\n".join(found)


def test_the_helper_sits_below_every_stage() -> None:
    """``guardrepro.serde`` is used by artifacts, bench, run and checks alike: it
    imports nothing of the project but the error types and the strict key check."""
    imports = set()
    for path in (ROOT / "guardrepro/serde").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("guardrepro"):
                imports.add(node.module)
            elif isinstance(node, ast.Import):
                imports.update(a.name for a in node.names if a.name.startswith("guardrepro"))
    assert imports == {"guardrepro.errors", "guardrepro.spec"}


def test_the_count_sees_methods_and_functions(tmp_path: Path) -> None:
    # the counter is the same walk as the test above, over a known file
    src = ("class A:\n    def to_dict(self): ...\n    async def from_json(self): ...\n"
           "def to_json(x): ...\ndef to_dicts(x): ...\n")
    names = [n.name for n in ast.walk(ast.parse(src))
             if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name in NAMES]
    assert sorted(names) == ["from_json", "to_dict", "to_json"]


@pytest.mark.parametrize("name, cls_path", [
    ("gate.json", "guardrepro.checks.parity.gate_types:GateResult"),
    ("stats.json", "guardrepro.checks.stats.types:StatsResult"),
    ("compare.json", "guardrepro.checks.parity.compare:Comparison"),
])
def test_demo_files_read_back_and_write_the_same_bytes(name: str, cls_path: str) -> None:
    import importlib

    module, attr = cls_path.split(":")
    cls = getattr(importlib.import_module(module), attr)
    written = (FIXTURES / name).read_text(encoding="utf-8")
    value = cls.from_dict(json.loads(written))
    assert value.to_json() == written
    assert text(value.to_dict()) == written or name == "compare.json"  # compare: ASCII
    assert cls.from_dict(json.loads(value.to_json())) == value


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return dict(json.loads(GOLDEN.read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_derived_json_is_what_the_hand_written_code_wrote(name: str,
                                                          golden: dict[str, Any]) -> None:
    written = text(as_json(BUILDERS[name]())).replace(str(ROOT), "$ROOT")
    assert written == text(golden[name])


def test_attribution_reads_back_and_names_a_bad_field() -> None:
    from guardrepro.checks.parity.attribute import Attribution

    att = BUILDERS["attribution"]()
    data = json.loads(text(att.to_dict()))
    assert Attribution.from_dict(data) == att
    assert all("score_drift" not in run for run in data["runs"])  # None: no key
    data["runs"][0]["compared"] = "4"
    with pytest.raises(InputError) as info:
        Attribution.from_dict(data, file="attribution.json")
    assert (info.value.file, info.value.field) == ("attribution.json", "runs.0.compared")
    assert "expected int, got str" in str(info.value)


def test_score_keys_of_a_compared_row_are_written_only_when_scored() -> None:
    from guardrepro.checks.parity.compare import RowComparison

    base = dict(row_id="r1", variant="original", domain="d", gold_label=1.0, same_input=True,
                tokens_identical=True, first_divergence=None, tokens_a=3, tokens_b=3,
                status_a="ok", status_b="ok", score_a=1.0, score_b=1.0, exact_agree=True,
                strict_a=1, strict_b=1, strict_agree=True, margin_a=0.5, margin_b=0.25)
    plain = RowComparison(**base, base_sample_id="b1")  # type: ignore[arg-type]
    assert set(plain.to_dict()) == set(base)  # no p_unsafe: none of the three keys
    scored = RowComparison(**base, p_unsafe_a=0.9, base_sample_id="b1")  # type: ignore[arg-type]
    assert scored.to_dict()["p_unsafe_b"] is None
    assert scored.to_dict()["base_sample_id"] == "b1"
    assert RowComparison.from_dict(scored.to_dict()) == scored
    assert RowComparison.from_dict(plain.to_dict()) == RowComparison(**base)  # type: ignore[arg-type]


def test_gate_spec_keeps_its_bootstrap_object() -> None:
    from guardrepro.checks.parity.gate_spec import GateSpec

    data = json.loads((FIXTURES / "gate.json").read_text(encoding="utf-8"))["spec"]
    spec = GateSpec.from_dict(data)
    assert (spec.replicates, spec.seed, spec.confidence) == (
        data["bootstrap"]["replicates"], data["bootstrap"]["seed"],
        data["bootstrap"]["confidence"])
    assert spec.to_dict() == data
    data["bootstrap"]["seeds"] = 1
    with pytest.raises(InputError) as info:
        GateSpec.from_dict(data, file="gate.json")
    assert (info.value.file, info.value.field) == ("gate.json", "bootstrap.seeds")


def test_gate_file_errors_name_the_file_and_the_nested_field() -> None:
    from guardrepro.checks.parity.gate_types import GateResult

    data = json.loads((FIXTURES / "gate.json").read_text(encoding="utf-8"))
    data["spec"]["bootstrap"]["confidence"] = True
    with pytest.raises(InputError) as info:
        GateResult.from_dict(data, file="run/gate.json")
    assert (info.value.file, info.value.field) == ("run/gate.json",
                                                   "spec.bootstrap.confidence")


# --- the helper's rules on small classes, expectations written by hand


@dataclass(frozen=True)
class Leaf(JsonValue):
    JSON_DERIVED: ClassVar[tuple[Any, ...]] = (("double", "twice"),)

    n: int
    path: Path = opt(key="file")
    note: str | None = opt(omit_none=True, default=None)

    @property
    def twice(self) -> int:
        return 2 * self.n


@dataclass(frozen=True)
class Tree(JsonValue):
    leaves: tuple[Leaf, ...]
    seed: int = opt(group="settings", default=0)
    rate: float = opt(group="settings", default=0.5)
    tags: list[str] = field(default_factory=list)


def test_options_by_hand() -> None:
    tree = Tree((Leaf(1, Path("a/b")), Leaf(2, Path("c"), "x")), seed=7, tags=["t"])
    data = {"leaves": [{"n": 1, "file": "a/b", "double": 2},
                       {"n": 2, "file": "c", "note": "x", "double": 4}],
            "settings": {"seed": 7, "rate": 0.5}, "tags": ["t"]}
    assert tree.to_dict() == data
    assert Tree.from_dict(data) == tree
    assert Tree.from_dict({"leaves": []}) == Tree(())  # defaults, group absent


@pytest.mark.parametrize("data, field_path, words", [
    ({"leaves": [{"n": 1, "file": "a", "color": 3}]}, "leaves.0.color", "color"),
    ({"leaves": [{"file": "a"}]}, "leaves.0.n", "needs 'n'"),
    ({"leaves": [{"n": True, "file": "a"}]}, "leaves.0.n", "expected int, got bool"),
    ({"leaves": [{"n": 1, "file": 3}]}, "leaves.0.file", "expected a path string"),
    ({"leaves": {"n": 1}}, "leaves", "expected a list"),
    ({"leaves": [], "settings": {"rate": "0.5"}}, "settings.rate", "expected float"),
    ({"leaves": [], "settings": []}, "settings", "expected an object"),
])
def test_bad_input_is_refused_with_file_and_field(data: Any, field_path: str,
                                                  words: str) -> None:
    with pytest.raises(InputError) as info:
        Tree.from_dict(data, file="t.json")
    assert (info.value.file, info.value.field) == ("t.json", field_path)
    assert words in str(info.value)


def test_an_int_is_a_float_but_a_float_is_not_an_int() -> None:
    assert from_json_value(float, 1) == 1
    with pytest.raises(InputError):
        from_json_value(int, 1.0)
