"""guardrepro doctor: the batch-invariance decision table and the refusal."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from runner_helpers import write_profile

from guardrepro.cli import cli, main
from guardrepro.run.doctor import (
    RULES,
    BatchInvarianceRefused,
    Facts,
    diagnose,
    evaluate,
    gather_facts,
    preflight,
)
from guardrepro.run.profile import RunProfile
from guardrepro.run.runners.backends import HF, MLX, VLLM

BASE = Facts(
    backend="vllm", versions={"vllm": "0.32.0"}, device="cuda", device_name="GPU",
    compute_capability=(9, 0), dtype="bfloat16", concurrency=32, batch_invariant_mode=True,
    multiprocessing=False, max_num_seqs=32, threads=8,
)

# (change to BASE, expected verdict) — written from the rules in the doctor's docstring.
CASES = [
    ({}, "guaranteed"),  # vLLM invariant mode on H100-class
    ({"concurrency": 43}, "guaranteed"),
    ({"concurrency": 44}, "unknown"),  # vLLM #51187: the mode breaks at ~44 sequences
    ({"concurrency": 256, "compute_capability": (8, 0)}, "unknown"),
    ({"concurrency": 64, "batch_invariant_mode": False}, "not-invariant"),
    ({"concurrency": 64, "device": "cpu", "compute_capability": None, "dtype": "float32"},
     "observed"),  # the CPU engine has no invariant mode to break
    ({"compute_capability": (8, 0)}, "guaranteed"),  # A100 with vLLM 0.32
    ({"compute_capability": (8, 0), "versions": {"vllm": "0.11.0"}}, "not-invariant"),
    ({"compute_capability": (9, 0), "versions": {"vllm": "0.11.0"}}, "guaranteed"),
    ({"compute_capability": (7, 5)}, "not-invariant"),  # T4
    ({"compute_capability": None}, "unknown"),  # asked for CUDA, none visible here
    ({"batch_invariant_mode": False}, "not-invariant"),
    ({"batch_invariant_mode": False, "concurrency": 1}, "no-batching"),
    ({"device": "cpu", "compute_capability": None, "dtype": "float32"}, "observed"),
    ({"device": "cpu", "compute_capability": None, "dtype": "bfloat16"}, "not-invariant"),
    ({"backend": "hf", "device": "cpu", "dtype": "float32", "batch_invariant_mode": None},
     "observed"),
    ({"backend": "hf", "device": "cpu", "dtype": "bfloat16", "batch_invariant_mode": None},
     "not-invariant"),
    ({"backend": "hf", "device": "cuda", "dtype": "bfloat16", "batch_invariant_mode": None},
     "not-invariant"),
    ({"backend": "hf", "device": "cuda", "dtype": "float32", "batch_invariant_mode": None},
     "unknown"),
    ({"backend": "hf", "dtype": "bfloat16", "concurrency": 1}, "no-batching"),
    ({"backend": "mlx", "device": "gpu", "concurrency": 1, "dtype": None}, "no-batching"),
]


@pytest.mark.parametrize(("change", "expected"), CASES)
def test_rule_table(change: dict[str, object], expected: str) -> None:
    verdict = evaluate(replace(BASE, **change))  # type: ignore[arg-type]
    assert verdict.verdict == expected
    assert verdict.accepted == (expected in ("no-batching", "guaranteed", "observed"))


def test_last_rule_matches_everything() -> None:
    odd = Facts(None, {}, "tpu", None, None, None, None, None, None, None, None)
    assert RULES[-1].matches(odd)
    assert evaluate(odd).verdict == "unknown"


def test_gather_facts_fills_each_backends_defaults() -> None:
    facts = gather_facts(VLLM, {"dtype": "float32", "device": "cpu", "max_num_seqs": 8,
                                  "batch_size": 16})
    assert (facts.device, facts.concurrency, facts.max_num_seqs) == ("cpu", 8, 8)
    assert facts.batch_invariant_mode is False and facts.multiprocessing is False
    hf = gather_facts(HF, {"dtype": "float32", "device": "cpu", "batch_size": 4, "threads": 1})
    assert (hf.concurrency, hf.threads, hf.batch_invariant_mode) == (4, 1, None)
    assert gather_facts(MLX, {}).concurrency == 1


def _profile(tmp_path: Path, **options: object) -> Path:
    template = tmp_path / "template.txt"
    template.write_text("{user_request} {agent_action} {env_info}")
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    return write_profile(tmp_path / "p.toml", tmp_path / "ckpt", template, options=dict(options))


def test_preflight_refuses_bf16_batches_and_accepts_fp32_on_cpu(tmp_path: Path) -> None:
    bf16 = RunProfile.load(_profile(tmp_path, dtype="bfloat16", batch_size=4))
    with pytest.raises(BatchInvarianceRefused, match="not-invariant") as info:
        preflight(bf16, require=True)
    assert info.value.exit_code == 2
    assert preflight(bf16).verdict is not None  # not required: only reported
    fp32 = RunProfile.load(_profile(tmp_path, dtype="float32", batch_size=4))
    assert preflight(fp32, require=True).verdict.verdict == "observed"  # type: ignore[union-attr]


def test_profile_key_demands_invariance(tmp_path: Path) -> None:
    path = _profile(tmp_path, dtype="bfloat16", batch_size=4)
    path.write_text("require_batch_invariance = true\n" + path.read_text())
    profile = RunProfile.load(path)
    with pytest.raises(BatchInvarianceRefused, match="require_batch_invariance"):
        preflight(profile)
    assert not preflight(profile, require=False).refused
    assert main(["doctor", "--profile", str(path)]) == 2


def test_env_contradicting_profile_is_warned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = RunProfile.load(_profile(tmp_path, dtype="float32", batch_size=2))
    options = {"dtype": "float32", "device": "cpu"}
    profile = replace(profile, descriptor=VLLM, backend_options=options,
                      checked_options=VLLM.options.check(options))
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    report = diagnose(profile)
    assert any("VLLM_BATCH_INVARIANT=1" in w for w in report.warnings)


def test_doctor_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    plain = runner.invoke(cli, ["doctor"])
    assert plain.exit_code == 0, plain.output
    assert "versions:" in plain.output and "threads:" in plain.output
    path = _profile(tmp_path, dtype="bfloat16", batch_size=4)
    shown = runner.invoke(cli, ["doctor", "--profile", str(path), "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["facts"]["dtype"] == "bfloat16" and data["facts"]["concurrency"] == 4
    assert data["batch_invariance"]["verdict"] == "not-invariant" and not data["refused"]
    assert main(["doctor", "--profile", str(path), "--require-batch-invariance"]) == 2
