"""A backend added the way docs/CONTRIBUTING.md says: a runner class, one
descriptor given to ``registry.register`` and a profile, nothing else.

The ``echo`` runner answers every request with the last ``tokens`` ids of its
prompt followed by the checkpoint's first EOS id. On the toy guard the prompt
ends with the chat template's generation prompt, so the expectation is read
from the checkpoint's own files (its chat template, tokenizer and EOS ids)
with the ``tokenizers`` library, not from guardrepro.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from guardrepro.cli import main
from guardrepro.decoding import DecodingParams
from guardrepro.errors import InputError
from guardrepro.run.doctor import diagnose, evaluate, gather_facts
from guardrepro.run.profile import BACKENDS, RunProfile
from guardrepro.run.runners import registry
from guardrepro.run.runners.backends import Backend, DoctorFacts
from guardrepro.run.runners.base import Generation, GenerationRequest, shared_timings
from guardrepro.run.runners.options import CheckedOptions, Option, OptionTable

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "guardrepro" / "data" / "toy_guard"
ROWS = 6

ECHO_OPTIONS = OptionTable("echo", (
    Option("tokens", (int,), 2, "prompt ids echoed", minimum=1),
    Option("batch_size", (int,), 1, "requests per generate call", minimum=1),
))


class EchoRunner:
    """Echoes the prompt's last ``tokens`` ids, then stops on the first EOS id."""

    backend = "echo"

    def __init__(self, checkpoint_dir: Path, options: Mapping[str, Any], *,
                 eos_token_ids: Sequence[int], pad_token_id: int | None,
                 decode: Callable[[Sequence[int]], str]) -> None:
        self.received = options
        self.tokens = int(ECHO_OPTIONS.check(options)["tokens"])
        self.eos = tuple(eos_token_ids)
        self.decode = decode

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "tokens": self.tokens}

    def generate(self, requests: Sequence[GenerationRequest],
                 params: DecodingParams) -> list[Generation]:
        started = time.perf_counter()
        out = []
        for request in requests:
            ids = [*request.prompt_token_ids[-self.tokens:], self.eos[0]]
            out.append(Generation.from_tokens(
                request.row_id, ids, [0.0] * len(ids), eos_token_ids=self.eos,
                decode=self.decode, timings=shared_timings(0.0, time.perf_counter() - started)))
        return out

    def close(self) -> None:
        return None


ECHO = Backend(name="echo", label="echo", runner=f"{__name__}:EchoRunner",
               options=ECHO_OPTIONS, doctor=DoctorFacts(concurrency=1))


@pytest.fixture
def echo() -> Iterator[Backend]:
    registry.register(ECHO)
    try:
        yield ECHO
    finally:
        registry.unregister("echo")


def _profile(path: Path, options: str = "tokens = 4") -> Path:
    lock = ROOT / "locks" / "toy-guard.toml"
    path.write_text(
        'name = "toy-echo"\nbackend = "echo"\n\n'
        f'[guard]\nname = "toy-guard"\ntemplate_lock = "{lock}"\n'
        'template_file = "template.txt"\n\n'
        f'[checkpoint]\nlock = "{lock}"\n\n'
        f"[backend_options]\n{options}\n\n"
        '[decoding]\nmode = "greedy"\nmax_new_tokens = 8\n', encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The toy guard in a fresh home and the first ROWS rows of the toy cohort."""
    from guardrepro.artifacts.fetch import fetch_lock
    from guardrepro.bench.cohort.build import build_cohort_file

    base = tmp_path_factory.mktemp("echo-toy")
    fetch_lock(ROOT / "locks/toy-guard.toml", base / "home", progress=False)
    full = base / "full.jsonl"
    build_cohort_file(ROOT / "cohorts/toy-64.toml", ROOT / "guardrepro/data/toy_bench", full)
    cohort = base / "cohort.jsonl"
    cohort.write_bytes(b"".join(full.read_bytes().splitlines(keepends=True)[:ROWS]))
    return {"home": base / "home", "cohort": cohort}


def _expected_tail(n: int) -> tuple[list[int], str, set[int]]:
    """The last ``n`` prompt ids the toy checkpoint's own files imply: its chat
    template ends every prompt with a fixed generation prompt."""
    from tokenizers import Tokenizer

    template = json.loads((TOY / "tokenizer_config.json").read_text())["chat_template"]
    suffix = template.rsplit("{{- '", 1)[1].split("' }}", 1)[0].encode().decode("unicode_escape")
    tokenizer = Tokenizer.from_file(str(TOY / "tokenizer.json"))
    ids = tokenizer.encode(suffix, add_special_tokens=False).ids
    assert len(ids) >= n
    eos = set(json.loads((TOY / "generation_config.json").read_text())["eos_token_id"])
    return ids[-n:], tokenizer.decode(ids[-n:], skip_special_tokens=True), eos


def test_an_echo_backend_runs_the_toy_cohort(echo: Backend, toy: dict[str, Path],
                                             tmp_path: Path) -> None:
    profile = _profile(tmp_path / "echo.toml")
    out = tmp_path / "run"
    assert main(["run", "--profile", str(profile), "--cohort", str(toy["cohort"]), "--out",
                 str(out), "--home", str(toy["home"]), "--no-progress"]) == 0
    tail, text, eos = _expected_tail(4)
    assert text == "assistant\n"  # '<|im_start|>assistant\n' without its special token
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    cohort = [json.loads(line) for line in toy["cohort"].read_text().splitlines()]
    assert [r["row_id"] for r in records] == [row["sample"]["sample_id"] for row in cohort]
    for record in records:
        ids = record["output_token_ids"]
        assert ids[:-1] == tail and ids[-1] in eos
        assert (record["output_text"], record["finish_reason"]) == (text, "stop")
        # no tags in "assistant\n": the TS-Guard parser's documented error
        assert (record["status"], record["error_type"], record["score"]) == (
            "parse_error", "missing_or_malformed_tags", None)
        assert record["provenance"]["backend"] == "echo"
        assert record["provenance"]["backend_config"] == {"backend": "echo", "tokens": 4}


def test_the_echo_options_are_enforced_naming_the_profile(
        echo: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = _profile(tmp_path / "echo.toml", "tokens = 0")
    with pytest.raises(InputError) as info:
        RunProfile.load(profile)
    assert (info.value.file, info.value.field) == (str(profile), "backend_options.tokens")
    assert "expected an integer >= 1, got 0" in str(info.value)
    assert main(["doctor", "--profile", str(profile)]) == 2
    assert f"{profile}, field 'backend_options.tokens'" in capsys.readouterr().err


def test_doctor_reports_a_descriptor_only_backend(echo: Backend, tmp_path: Path) -> None:
    facts = gather_facts(echo, {"tokens": 3})
    # nothing declared but one request at a time: no device library, no packages
    assert (facts.backend, facts.device, facts.dtype, facts.concurrency) == ("echo", "cpu",
                                                                            None, 1)
    assert (facts.max_num_seqs, facts.batch_invariant_mode, facts.threads) == (None, None, None)
    assert set(facts.versions) == {"guardrepro"}
    report = diagnose(RunProfile.load(_profile(tmp_path / "echo.toml")))
    assert report.verdict is not None and report.verdict.verdict == "no-batching"
    assert report.warnings == []


def test_doctor_names_an_unknown_backend_without_assuming_its_options() -> None:
    with pytest.raises(InputError) as info:
        registry.backend_of("echo")  # the one lookup by name
    assert info.value.field == "backend" and "unknown backend 'echo'" in str(info.value)
    # a descriptor is passed, so it need not be registered
    unknown = Backend(name="plain", label="plain", runner="nowhere:Nothing",
                      options=OptionTable("plain", ()))
    facts = gather_facts(unknown, {})
    assert facts.concurrency is None and facts.max_num_seqs is None
    # concurrency not declared: the table cannot claim invariance
    assert evaluate(facts).verdict == "unknown"
    with pytest.raises(InputError) as info:
        gather_facts(unknown, {"max_num_seqs": 4})  # its options are its table's alone
    assert info.value.field == "backend_options.max_num_seqs"


def test_registration_is_checked(echo: Backend) -> None:
    with pytest.raises(InputError, match="already registered"):
        registry.register(ECHO)
    assert registry.RUNNERS["echo"] == f"{__name__}:EchoRunner"
    assert list(registry.RUNNERS)[-1] == "echo" and "echo" in BACKENDS
    assert registry.DEPENDENCIES["echo"] == () and registry.EXTRAS["echo"] == ""


def test_create_runner_checks_the_options_once_and_hands_them_filled() -> None:
    # The descriptor itself is passed: the backend need not be registered by name.
    runner = registry.create_runner(ECHO, TOY, {"tokens": 3}, eos_token_ids=(7,),
                                    pad_token_id=None, decode=str)
    assert isinstance(runner, EchoRunner) and "echo" not in registry.RUNNERS
    assert isinstance(runner.received, CheckedOptions)
    assert dict(runner.received) == {"tokens": 3, "batch_size": 1}  # the declared default
    assert ECHO_OPTIONS.check(runner.received) is runner.received  # not checked again
    other = OptionTable("other", ECHO_OPTIONS.options)
    assert other.check(runner.received) is not runner.received  # another table checks anew
    with pytest.raises(InputError) as info:  # refused before the runner is built
        registry.create_runner(ECHO, TOY, {"tokens": 0}, eos_token_ids=(7,),
                               pad_token_id=None, decode=str)
    assert info.value.field == "backend_options.tokens"


def test_a_loaded_profile_carries_its_descriptor_to_the_records(
        toy: dict[str, Path], tmp_path: Path) -> None:
    """The name is looked up when the profile is read and nowhere after: the
    run goes through once the name is no longer registered."""
    from guardrepro.run.pipeline import run_cohort

    registry.register(ECHO)
    try:
        profile = RunProfile.load(_profile(tmp_path / "echo.toml", "tokens = 2"))
    finally:
        registry.unregister("echo")
    assert profile.descriptor is ECHO and "echo" not in registry.RUNNERS
    out = tmp_path / "run"
    summary = run_cohort(profile, toy["cohort"], out, progress=False, home=toy["home"])
    assert summary.generated == ROWS
    tail, _, eos = _expected_tail(2)
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == ROWS
    assert all(r["output_token_ids"][:-1] == tail and r["output_token_ids"][-1] in eos
               for r in records)
    assert records[0]["provenance"]["backend_config"] == {"backend": "echo", "tokens": 2}
