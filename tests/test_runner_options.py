"""Each runner declares its options once; registry and doctor read that table."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from guardrepro.errors import InputError
from guardrepro.run.doctor import gather_facts
from guardrepro.run.runners.registry import RUNNERS, option_table, runner_class


def test_the_table_is_read_without_importing_the_runner() -> None:
    code = ("import sys\nfrom guardrepro.run.runners.registry import option_table\n"
            "t = option_table('hf')\nassert t.default('dtype') == 'float32', t\n"
            "heavy = [m for m in ('torch', 'transformers', 'vllm', 'mlx') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "assert 'guardrepro.run.runners.hf_runner' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("backend", ["hf", "rule", "vllm"])
def test_runner_class_carries_the_registry_table(backend: str) -> None:
    if backend == "hf":
        pytest.importorskip("torch")
    assert runner_class(backend).OPTIONS is option_table(backend)


def test_vllm_option_dataclass_agrees_with_the_declaration() -> None:
    from guardrepro.run.runners.vllm_runner import VLLMOptions

    fields = {f.name: f.default for f in dataclasses.fields(VLLMOptions)}
    fields["dtype"] = None  # required: no default in the dataclass, none declared
    assert fields == option_table("vllm").defaults()


def test_hf_runner_refuses_an_undeclared_option() -> None:
    pytest.importorskip("torch")
    from guardrepro.run.runners.hf_runner import _validate

    assert _validate({}) == {**option_table("hf").defaults()}
    with pytest.raises(InputError) as info:
        _validate({"surprise": 1})
    assert info.value.field == "backend_options.surprise"


def test_doctor_fills_the_declared_defaults() -> None:
    facts = gather_facts("vllm", {"dtype": "bfloat16"})
    # declared: max_num_seqs 256, batch_size 1, batch invariance and multiprocessing off
    assert (facts.concurrency, facts.max_num_seqs, facts.batch_invariant_mode,
            facts.multiprocessing) == (1, 256, False, False)
    assert gather_facts("hf", {"batch_size": 4}).dtype == "float32"


def test_every_backend_has_a_table() -> None:
    assert set(RUNNERS) == {b for b in RUNNERS if option_table(b).backend == b}
