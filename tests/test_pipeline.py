"""run_cohort on a tiny random Qwen2: prompts, records, provenance, resume, attempts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from runner_helpers import (
    TEMPLATE,
    build_diverse_tiny,
    chatml,
    cohort_row,
    write_cohort,
    write_profile,
)
from tokenizers import Tokenizer

from guardrepro.decoding import DecodingParams
from guardrepro.errors import InferenceError, PromptError, ProvenanceError
from guardrepro.guards.base import GuardTemplate
from guardrepro.guards.registry import get_guard
from guardrepro.guards.ts_guard.parser import parse_ts_guard
from guardrepro.run.attempts import decision_margin, generate_chunk, token_index_at
from guardrepro.run.pipeline import prepare_rows, run_cohort
from guardrepro.run.prompts import PromptTokenizer
from guardrepro.run.runners.backends import HF
from guardrepro.run.runners.base import Generation, GenerationRequest, Timings
from guardrepro.run.runners.registry import create_runner
from guardrepro.rundir.cohort import read_cohort
from guardrepro.rundir.manifest import read_manifest
from guardrepro.rundir.records import read_records
from guardrepro.schema import CohortRow

VOLATILE = ("created_at", "timings", "peak_memory_bytes", "run_id")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_diverse_tiny(tmp_path_factory.mktemp("pipe") / "tiny")


@pytest.fixture()
def setup(tiny: Path, tmp_path: Path) -> dict[str, Path]:
    template = tmp_path / "template.txt"
    template.write_text(TEMPLATE, encoding="utf-8")
    return {
        "template": template,
        "cohort": write_cohort(tmp_path / "cohort.jsonl", 6),
        "profile": write_profile(tmp_path / "p.toml", tiny, template),
    }


def stable(record: dict) -> dict:  # type: ignore[type-arg]
    return {k: v for k, v in record.items() if k not in VOLATILE}


def test_prompt_ids_are_what_the_chat_template_says(tiny: Path) -> None:
    sha = hashlib.sha256(TEMPLATE.encode()).hexdigest()
    guard = get_guard("toy-guard", GuardTemplate(TEMPLATE, sha))
    rows = [CohortRow.from_dict(cohort_row(i)) for i in range(3)]
    prepared = prepare_rows(guard, PromptTokenizer(tiny), rows, 8)
    tok = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    for p, row in zip(prepared, rows, strict=True):
        s = row.sample
        action = {"interaction_history": s["history"], "current_action": s["current_action"]}
        text = TEMPLATE.format(
            user_request=s["instruction"], agent_action=str(action), env_info=s["env_info"]
        )
        assert "'interaction_history': '[{\"role\": \"user\"" in text  # str() of a dict of str
        assert p.text == text
        assert p.input_sha256 == hashlib.sha256(text.encode("utf-8")).hexdigest()
        assert p.token_ids == tuple(tok.encode(chatml(text)).ids)


def test_too_long_prompt_is_refused_up_front(tiny: Path) -> None:
    guard = get_guard("toy-guard", GuardTemplate(TEMPLATE, "0" * 64))
    rows = [CohortRow.from_dict(cohort_row(i)) for i in range(2)]
    with pytest.raises(PromptError, match=r"row 0 \(row000\).*exceeds the context of 4096"):
        prepare_rows(guard, PromptTokenizer(tiny), rows, 4000)


def test_run_writes_manifest_and_one_record_per_row(
    setup: dict[str, Path], tmp_path: Path, tiny: Path
) -> None:
    from guardrepro.artifacts.treehash import tree_hash

    summary = run_cohort(setup["profile"], setup["cohort"], tmp_path / "run", progress=False)
    assert (summary.rows_selected, summary.generated, summary.already_done) == (6, 6, 0)
    assert summary.remaining == 0 and sum(summary.counts.values()) == 6
    records = read_records(tmp_path / "run")
    cohort = read_cohort(setup["cohort"])
    assert [r.row_id for r in records] == [row.row_id for row in cohort]
    manifest = read_manifest(tmp_path / "run")
    assert manifest is not None and manifest.run_id == "run"
    assert manifest.cohort["sha256"] == hashlib.sha256(setup["cohort"].read_bytes()).hexdigest()
    assert manifest.profile["sha256"] == hashlib.sha256(setup["profile"].read_bytes()).hexdigest()
    prov = manifest.provenance
    assert prov.model_revision == "unpinned" and prov.sha256 == manifest.provenance_sha256
    assert prov.artifact_tree_sha256 == tree_hash(tiny).sha256
    assert prov.template_sha256 == hashlib.sha256(TEMPLATE.encode()).hexdigest()
    assert prov.backend_config["dtype"] == "float32"
    assert prov.decoding["max_new_tokens"] == 8
    for record, row in zip(records, cohort, strict=True):
        assert record.provenance_sha256 == manifest.provenance_sha256
        assert record.gold_label == row.gold_label and record.variant == row.variant
        # the record's status and score are those of parsing its own output text
        parsed = parse_ts_guard(record.output_text)
        # (an unparsed output that reached max_new_tokens is truncated)
        unparsed = "truncated" if record.finish_reason == "length" else "parse_error"
        assert record.status == ("ok" if parsed.status == "ok" else unparsed)
        assert record.score == parsed.score
        assert len(record.output_token_ids) == 8 or record.finish_reason == "stop"
        assert len(record.attempts) == 1 and record.attempts[0].seed is None
    # a rerun resumes and has nothing left to do
    again = run_cohort(setup["profile"], setup["cohort"], tmp_path / "run", progress=False)
    assert (again.generated, again.already_done) == (0, 6)
    assert read_records(tmp_path / "run") == records


def test_limit_then_resume_equals_one_run(setup: dict[str, Path], tmp_path: Path) -> None:
    part = run_cohort(setup["profile"], setup["cohort"], tmp_path / "a", limit=3, progress=False)
    assert (part.generated, part.remaining) == (3, 3)
    rest = run_cohort(setup["profile"], setup["cohort"], tmp_path / "a", progress=False)
    assert (rest.generated, rest.already_done) == (3, 3)
    whole = run_cohort(setup["profile"], setup["cohort"], tmp_path / "b", progress=False)
    assert whole.generated == 6
    resumed = [stable(r.to_dict()) for r in read_records(tmp_path / "a")]
    single = [stable(r.to_dict()) for r in read_records(tmp_path / "b")]
    assert resumed == single


def test_resume_with_different_options_is_refused(
    setup: dict[str, Path], tmp_path: Path, tiny: Path
) -> None:
    run_cohort(setup["profile"], setup["cohort"], tmp_path / "run", limit=2, progress=False)
    other = write_profile(tmp_path / "q.toml", tiny, setup["template"], options={"batch_size": 1})
    with pytest.raises(ProvenanceError, match=r"backend_config\.batch_size: 2 != 1"):
        run_cohort(other, setup["cohort"], tmp_path / "run", progress=False)
    longer = write_profile(
        tmp_path / "r.toml", tiny, setup["template"], decoding="max_new_tokens = 9"
    )
    with pytest.raises(ProvenanceError, match=r"decoding\.max_new_tokens: 8 != 9"):
        run_cohort(longer, setup["cohort"], tmp_path / "run", progress=False)
    bigger = write_cohort(tmp_path / "bigger.jsonl", 7)
    with pytest.raises(ProvenanceError, match=r"cohort\.sha256"):
        run_cohort(setup["profile"], bigger, tmp_path / "run", progress=False)
    with pytest.raises(ProvenanceError, match="shard: None != '1/2'"):
        run_cohort(setup["profile"], setup["cohort"], tmp_path / "run", shard="1/2", progress=False)
    assert len(read_records(tmp_path / "run")) == 2  # nothing was added by the refused runs


def test_shards_partition_the_cohort(setup: dict[str, Path], tmp_path: Path) -> None:
    ids = []
    for k in (1, 2, 3):
        summary = run_cohort(
            setup["profile"], setup["cohort"], tmp_path / f"s{k}", shard=f"{k}/3", progress=False
        )
        assert read_manifest(tmp_path / f"s{k}").shard == f"{k}/3"  # type: ignore[union-attr]
        ids += [r.row_id for r in read_records(tmp_path / f"s{k}")]
        assert summary.rows_in_cohort == 6
    assert sorted(ids) == [f"row{i:03d}" for i in range(6)]


def test_sampled_mode_retries_with_derived_seeds(
    setup: dict[str, Path], tmp_path: Path, tiny: Path
) -> None:
    profile = write_profile(
        tmp_path / "s.toml",
        tiny,
        setup["template"],
        decoding='mode = "sampled"\nmax_new_tokens = 6\nseed = 11',
    )
    run_cohort(profile, setup["cohort"], tmp_path / "run", limit=2, progress=False)
    records = read_records(tmp_path / "run")
    for record in records:
        # the random model never writes the tags, so every attempt is used
        unparsed = "truncated" if record.finish_reason == "length" else "parse_error"
        assert record.status == unparsed
        assert [a.status for a in record.attempts] == [
            "truncated" if a.finish_reason == "length" else "parse_error"
            for a in record.attempts]
        assert record.provenance.decoding["temperature"] == 0.1
        seeds = [a.seed for a in record.attempts]
        # repeat 11: the published string for attempt a (counted from 1), then ":r11"
        expected = [
            int(hashlib.sha256(
                f"260828:{record.base_sample_id}:python:{a}:r11".encode()).hexdigest()[:8], 16)
            for a in (1, 2, 3)
        ]
        assert seeds == expected
        assert record.output_token_ids == record.attempts[-1].token_ids
    # both rows are variants of base0: they share their seeds
    assert {r.base_sample_id for r in records} == {"base0"} and len(records) == 2
    assert [a.seed for a in records[0].attempts] == [a.seed for a in records[1].attempts]


def test_token_index_and_decision_margin_from_offsets(tiny: Path) -> None:
    tokenizer = PromptTokenizer(tiny)
    guard = get_guard("toy-guard", GuardTemplate(TEMPLATE, "0" * 64))
    text = (
        "<Think> fine <\\Think> <Malicious_User_Request>no<\\Malicious_User_Request> "
        "<Being_Attacked>yes<\\Being_Attacked> <Harmfulness_Rating>0.5<\\Harmfulness_Rating>"
    )
    enc = Tokenizer.from_file(str(tiny / "tokenizer.json")).encode(text)
    ids = tuple(enc.ids)
    offset = text.index("0.5")
    # independently: the token whose character span covers the rating's first char
    expected = next(i for i, (a, b) in enumerate(enc.offsets) if a <= offset < b)
    assert token_index_at(ids, offset, tokenizer.decode) == expected
    generation = Generation(
        row_id="r",
        token_ids=(*ids, 2),
        text=text,
        finish_reason="stop",
        step_margins=tuple(float(10 * i) for i in range(len(ids) + 1)),
        timings=Timings(0.0, 0.0, 0.0),
    )
    assert decision_margin(guard, generation, tokenizer.decode) == 10.0 * expected
    no_rating = Generation(
        "r", ids[:5], tokenizer.decode(ids[:5]), "length", (1.0,) * 5, Timings(0.0, 0.0, 0.0)
    )
    assert decision_margin(guard, no_rating, tokenizer.decode) is None


class FailingRow:
    """A real HF runner that fails for one row id, as a backend error would."""

    backend = "hf"

    def __init__(self, inner, bad: str) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.bad, self.calls = inner, bad, []  # type: ignore[var-annotated]

    def describe(self):  # type: ignore[no-untyped-def]
        return self.inner.describe()

    def generate(self, requests: Sequence[GenerationRequest], params: DecodingParams):  # type: ignore[no-untyped-def]
        self.calls.append([r.row_id for r in requests])
        if any(r.row_id == self.bad for r in requests):
            raise InferenceError("device lost")
        return self.inner.generate(requests, params)

    def close(self) -> None:
        self.inner.close()


def test_inference_error_is_isolated_to_its_row(tiny: Path) -> None:
    tokenizer = PromptTokenizer(tiny)
    guard = get_guard("toy-guard", GuardTemplate(TEMPLATE, "0" * 64))
    rows = [CohortRow.from_dict(cohort_row(i)) for i in range(3)]
    prepared = prepare_rows(guard, tokenizer, rows, 4)
    inner = create_runner(
        HF, tiny, {"batch_size": 3}, eos_token_ids=[2, 0], pad_token_id=0, decode=tokenizer.decode
    )
    runner = FailingRow(inner, "row001")
    history = generate_chunk(
        runner, guard, prepared, DecodingParams(max_new_tokens=4), tokenizer.decode
    )
    assert runner.calls == [["row000", "row001", "row002"], ["row000"], ["row001"], ["row002"]]
    bad = history["row001"][0][0]
    assert bad.status == "inference_error" and bad.error_type == "InferenceError: device lost"
    for row_id in ("row000", "row002"):
        attempt = history[row_id][0][0]
        parsed = parse_ts_guard(attempt.text)
        unparsed = "truncated" if attempt.finish_reason == "length" else "parse_error"
        assert attempt.status == ("ok" if parsed.status == "ok" else unparsed)
    assert all(len(history[r][0][0].token_ids) >= 1 for r in ("row000", "row002"))
    json.dumps([a.__dict__ for a, _, _ in history["row001"]])


def _local_lock(path: Path, name: str, kind: str, directory: Path) -> Path:
    lines = [f'name = "{name}"', f'kind = "{kind}"', "", "[source]", 'type = "local"']
    lines += [f'path = "{directory}"', ""]
    for f in sorted(directory.iterdir()):
        data = f.read_bytes()
        lines += ["[[file]]", f'path = "{f.name}"']
        lines += [f'sha256 = "{hashlib.sha256(data).hexdigest()}"', f"size = {len(data)}", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def test_pinned_checkpoint_and_template_through_locks(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from guardrepro.artifacts.treehash import tree_hash

    tpl_dir = tmp_path / "tpl"
    tpl_dir.mkdir()
    (tpl_dir / "template.txt").write_text(TEMPLATE, encoding="utf-8")
    ckpt_lock = _local_lock(tmp_path / "ck.toml", "tinyck", "checkpoint", tiny)
    tpl_lock = _local_lock(tmp_path / "tpl.toml", "tpl", "files", tpl_dir)
    profile = tmp_path / "p.toml"
    profile.write_text(
        'name = "pinned"\nbackend = "hf"\n[guard]\nname = "toy-guard"\n'
        f'template_lock = "{tpl_lock.name}"\ntemplate_file = "template.txt"\n'
        f'[checkpoint]\nlock = "{ckpt_lock.name}"\n[backend_options]\nthreads = 1\n'
        "[decoding]\nmax_new_tokens = 4\n",
        encoding="utf-8",
    )
    cohort = write_cohort(tmp_path / "cohort.jsonl", 2)
    run_cohort(profile, cohort, tmp_path / "run", progress=False, home=tmp_path / "home")
    manifest = read_manifest(tmp_path / "run")
    assert manifest is not None
    assert manifest.provenance.model_revision == "local:tinyck"
    assert manifest.provenance.artifact_tree_sha256 == tree_hash(tiny).sha256
    assert manifest.provenance.template_sha256 == hashlib.sha256(TEMPLATE.encode()).hexdigest()
    assert len(read_records(tmp_path / "run")) == 2
    # a resume trusts the cached tree hash (stamps unchanged): no byte re-read
    import guardrepro.artifacts.treehash as treehash_mod

    reads: list[Path] = []

    def counting(directory: Path) -> object:
        reads.append(Path(directory))
        return tree_hash(directory)

    monkeypatch.setattr(treehash_mod, "tree_hash", counting)
    again = run_cohort(profile, cohort, tmp_path / "run", progress=False, home=tmp_path / "home")
    assert (again.already_done, reads) == (2, [])


def _locked_profile(tmp_path: Path, name: str, checkpoint: Path, template: Path,
                    guard: str) -> Path:
    lock = _local_lock(tmp_path / f"{name}.lock.toml", name, "checkpoint", checkpoint)
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\nbackend = "hf"\n[guard]\nname = "{guard}"\n'
        f'template_path = "{template}"\n[checkpoint]\nlock = "{lock.name}"\n'
        '[backend_options]\nthreads = 1\n[decoding]\nmax_new_tokens = 4\n',
        encoding="utf-8",
    )
    return path


def test_checkpoint_special_tokens_must_match_the_guard_pin(
    setup: dict[str, Path], tmp_path: Path, tiny: Path
) -> None:
    home = tmp_path / "home"
    # The tiny checkpoint declares eos [2, 0], pad 0 (toy.tiny); TS-Guard pins
    # eos {151645, 151643}, pad 151643 (docs/PROTOCOL.md): a locked checkpoint is
    # refused before generation.
    profile = _locked_profile(tmp_path, "tsg", tiny, setup["template"], "ts-guard")
    run = tmp_path / "refused"
    with pytest.raises(PromptError) as info:
        run_cohort(profile, setup["cohort"], run, progress=False, home=home)
    message = str(info.value)
    assert "generation_config.json: eos_token_id [0, 2], expected [151643, 151645]" in message
    assert "generation_config.json: pad_token_id 0, expected 151643" in message
    assert not run.exists()  # refused before its first record: nothing left behind

    # toy-guard expects ChatML's tokens by name; in the shipped toy guard they are
    # eos {2, 0} and pad 0
    shipped = json.loads(
        (Path(__file__).parents[1] / "guardrepro/data/toy_guard/generation_config.json").read_text()
    )
    assert (sorted(shipped["eos_token_id"]), shipped["pad_token_id"]) == ([0, 2], 0)

    # a copy of the tiny checkpoint whose pad id differs is refused under toy-guard
    import shutil

    copy = tmp_path / "tiny-pad"
    shutil.copytree(tiny, copy)
    gen = json.loads((copy / "generation_config.json").read_text())
    gen["pad_token_id"] = 2
    (copy / "generation_config.json").write_text(json.dumps(gen))
    profile = _locked_profile(tmp_path, "padck", copy, setup["template"], "toy-guard")
    # the ids are read from the checkpoint and named by its tokenizer: id 2 is <|im_end|>
    with pytest.raises(PromptError, match=r"pad_token_id 2 names <\|im_end\|>, "
                       r"expected <\|endoftext\|>") as info:
        run_cohort(profile, setup["cohort"], tmp_path / "refused2", progress=False, home=home)
    assert "eos_token_id" not in str(info.value)
    assert read_manifest(tmp_path / "refused2") is None

    # the matching case (toy-guard, the unmodified locked tiny checkpoint) runs
    profile = _locked_profile(tmp_path, "okck", tiny, setup["template"], "toy-guard")
    summary = run_cohort(profile, setup["cohort"], tmp_path / "ok", progress=False, home=home,
                         limit=1)
    assert summary.generated == 1

    # an unpinned checkpoint directory is not enforced: a warning, then the run
    profile = write_profile(tmp_path / "dir.toml", tiny, setup["template"], guard="ts-guard")
    with pytest.warns(UserWarning, match=r"pad_token_id 0, expected 151643.*not enforced"):
        summary = run_cohort(profile, setup["cohort"], tmp_path / "dir", progress=False,
                             limit=1)
    assert summary.generated == 1
