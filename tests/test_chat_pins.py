"""Published chat-template facts: the adapters' pins against the published values
(transcribed by hand), and the checks on real tokenizer files of tiny checkpoints
whose hashes the test computes itself (the real tokenizer_config.json files cannot
be downloaded here)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from guardrepro.errors import PromptError
from guardrepro.guards.base import ChatTemplatePin
from guardrepro.guards.registry import get_guard
from guardrepro.run.chat_pins import check_chat_template, check_pin
from guardrepro.run.prompts import PromptTokenizer
from scripts.toy.tiny_guards import build_tiny_guard

QWEN_06B = "Qwen/Qwen3Guard-Gen-0.6B@fada3b2f655b89601929198343c94cd2f64d93cc"
GEMMA_2B = "google/shieldgemma-2b@d1dffc9c8c9237a90aab09c61383791e718ef9e8"
THINK_SUFFIX = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_adapter_pins_are_the_published_values() -> None:
    qwen = get_guard("qwen3guard").chat_template_pins  # type: ignore[attr-defined]
    gemma = get_guard("shieldgemma").chat_template_pins  # type: ignore[attr-defined]
    llama = get_guard("llama-guard-3").chat_template_pins  # type: ignore[attr-defined]
    assert [(p.model_revision, p.tokenizer_config_sha256, p.template_sha256,
             p.generation_suffix, p.score_token_ids) for p in qwen] == [
        (QWEN_06B, "934e187433b06c5d28519e0347dd293084cf28621f00a86ae7e24e42f8b53e81", None,
         THINK_SUFFIX, ())]
    assert [(p.model_revision, p.tokenizer_config_sha256, p.template_sha256,
             p.generation_suffix, p.score_token_ids) for p in gemma] == [
        (GEMMA_2B, "20dc327cc0ddb4bad2ebc5042f561f89fc980855a87db593ed80ac07ca5efcba",
         "19acd33317c8f50293a85a53c141f282e4175da3da68473c30967c4ef9e366d0", None,
         (("Yes", 3553), ("No", 1294)))]
    assert llama == ()  # nothing published about either Llama Guard 3 template


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("pins")
    return {name: build_tiny_guard(name, base / name) for name in ("qwen3guard", "shieldgemma")}


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _template_sha(directory: Path) -> str:
    text = json.loads((directory / "tokenizer_config.json").read_text())["chat_template"]
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_matching_files_pass_every_check(tiny: dict[str, Path]) -> None:
    qwen = tiny["qwen3guard"]
    pin = ChatTemplatePin("Org/Q", "1" * 40,
                          tokenizer_config_sha256=_file_sha(qwen / "tokenizer_config.json"),
                          template_sha256=_template_sha(qwen), generation_suffix=THINK_SUFFIX)
    assert check_pin(pin, qwen, PromptTokenizer(qwen)) == [
        "tokenizer_config.json", "chat_template", "generation_suffix"]


def test_a_changed_template_is_refused(tiny: dict[str, Path], tmp_path: Path) -> None:
    original = tiny["qwen3guard"]
    pin = ChatTemplatePin("Org/Q", "1" * 40,
                          tokenizer_config_sha256=_file_sha(original / "tokenizer_config.json"),
                          template_sha256=_template_sha(original))
    changed = tmp_path / "changed"
    changed.mkdir()
    for path in original.iterdir():
        (changed / path.name).write_bytes(path.read_bytes())
    config = json.loads((changed / "tokenizer_config.json").read_text())
    config["chat_template"] = config["chat_template"].replace("# Task:", "# Task :")
    (changed / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = PromptTokenizer(changed)
    with pytest.raises(PromptError, match=r"tokenizer_config\.json") as info:
        check_pin(pin, changed, tokenizer)
    assert pin.tokenizer_config_sha256 in str(info.value)
    assert _file_sha(changed / "tokenizer_config.json") in str(info.value)
    # the template string on its own (e.g. a file that moved keys around)
    only_template = dataclasses.replace(pin, tokenizer_config_sha256=None)
    with pytest.raises(PromptError, match="chat template sha256") as info:
        check_pin(only_template, changed, tokenizer)
    assert _template_sha(original) in str(info.value) and _template_sha(changed) in str(
        info.value)


def test_generation_suffix_and_score_token_ids(tiny: dict[str, Path]) -> None:
    gemma = tiny["shieldgemma"]
    tokenizer = PromptTokenizer(gemma)
    vocab = json.loads((gemma / "tokenizer.json").read_text())["model"]["vocab"]
    right = ChatTemplatePin("Org/G", "2" * 40,
                            score_token_ids=(("Yes", vocab["Yes"]), ("No", vocab["No"])))
    assert check_pin(right, gemma, tokenizer) == ["score_token:Yes", "score_token:No"]
    published = ChatTemplatePin("Org/G", "2" * 40, score_token_ids=(("Yes", 3553),))
    assert vocab["Yes"] != 3553
    with pytest.raises(PromptError, match=r"score token 'Yes'.*3553"):
        check_pin(published, gemma, tokenizer)
    # ShieldGemma's prompt does not end with Qwen3's closed thinking block
    with pytest.raises(PromptError, match="end of the rendered prompt"):
        check_pin(ChatTemplatePin("Org/G", "2" * 40, generation_suffix=THINK_SUFFIX), gemma,
                  tokenizer)


def test_the_adapter_checks_only_its_published_revision(tiny: dict[str, Path]) -> None:
    qwen = tiny["qwen3guard"]
    guard = get_guard("qwen3guard")
    tokenizer = PromptTokenizer(qwen)
    assert check_chat_template(guard, qwen, "unpinned", tokenizer) == []
    assert check_chat_template(guard, qwen, "Qwen/Qwen3Guard-Gen-0.6B@" + "0" * 40,
                               tokenizer) == []
    # at the published revision, this (project-written) tokenizer_config.json is refused
    with pytest.raises(PromptError) as info:
        check_chat_template(guard, qwen, QWEN_06B, tokenizer)
    assert "934e187433b06c5d28519e0347dd293084cf28621f00a86ae7e24e42f8b53e81" in str(info.value)


def test_a_run_of_the_published_revision_with_another_template_is_refused(
        tiny: dict[str, Path], tmp_path: Path) -> None:
    """Fetched from a loopback hub at Qwen3Guard-Gen-0.6B's pinned revision, but the
    files are the tiny checkpoint's: resolving the run profile refuses it."""
    from loopback import HubFile, HubRepo, HubServer
    from test_fetch_hub import run_fetch

    from guardrepro.run.profile import RunProfile
    from guardrepro.run.resolve import resolve_profile

    qwen = tiny["qwen3guard"]
    repo, revision = QWEN_06B.split("@")
    names = sorted(p.name for p in qwen.iterdir())
    lock = tmp_path / "q.toml"
    lock.write_text(f'name = "q"\nkind = "checkpoint"\n\n[source]\ntype = "hf"\nrepo = "{repo}"\n'
                    f'revision = "{revision}"\n' + "".join(
                        f'\n[[file]]\npath = "{n}"\npinned_by = "first-download"\n'
                        for n in names))
    files = {n: HubFile((qwen / n).read_bytes(), lfs=n.endswith(".safetensors")) for n in names}
    with HubServer(HubRepo(repo, revision, files)) as hub:
        assert run_fetch(hub, lock, tmp_path / "home", tmp_path)["ok"]
    profile = tmp_path / "p.toml"
    profile.write_text('name = "p"\nbackend = "hf"\n[guard]\nname = "qwen3guard"\n'
                       '[checkpoint]\nlock = "q.toml"\n[backend_options]\ndtype = "float32"\n')
    with pytest.raises(PromptError, match=r"tokenizer_config\.json") as info:
        resolve_profile(RunProfile.load(profile), home=tmp_path / "home")
    assert "934e187433b06c5d28519e0347dd293084cf28621f00a86ae7e24e42f8b53e81" in str(info.value)
    assert _file_sha(qwen / "tokenizer_config.json") in str(info.value)
