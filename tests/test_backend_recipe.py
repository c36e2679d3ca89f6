"""docs/CONTRIBUTING.md's backend recipe, followed with a real transformers
backend (``tests/kvloop_backend.py``: a greedy loop over the KV cache).

- In this process, registered with ``registry.register``: ``guardrepro run``
  on the toy guard gives, row by row, the tokens of the hf backend's
  ``generate`` at batch 1, with the same margins up to float rounding; the
  descriptor's facts (``doctor``, the logit capability) come from it alone.
- In a copy of the tree (slow tier): the recipe's three files (the module
  under ``guardrepro/run/runners/``, its test, its row of docs/BACKENDS.md)
  are the only change, and a fresh interpreter knows the backend by name,
  imports no torch to list it, and runs the new test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kvloop_backend
import pytest
from recipe_tree import changed_files, copy_tree

from guardrepro.cli import main
from guardrepro.errors import InputError
from guardrepro.run.doctor import diagnose
from guardrepro.run.profile import RunProfile
from guardrepro.run.runners import registry
from guardrepro.run.runners.backends import Backend

ROOT = Path(__file__).resolve().parents[1]
ROWS = 6
LOCK = ROOT / "locks" / "toy-guard.toml"


@pytest.fixture
def kvloop() -> Iterator[Backend]:
    registry.register(kvloop_backend.DESCRIPTOR)
    try:
        yield kvloop_backend.DESCRIPTOR
    finally:
        registry.unregister("kvloop")


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The toy guard in a fresh home and the first ROWS rows of the toy cohort."""
    from guardrepro.artifacts.fetch import fetch_lock
    from guardrepro.bench.cohort.build import build_cohort_file

    base = tmp_path_factory.mktemp("kvloop-toy")
    fetch_lock(LOCK, base / "home", progress=False)
    full = base / "full.jsonl"
    build_cohort_file(ROOT / "cohorts/toy-64.toml", ROOT / "guardrepro/data/toy_bench", full)
    cohort = base / "cohort.jsonl"
    cohort.write_bytes(b"".join(full.read_bytes().splitlines(keepends=True)[:ROWS]))
    return {"home": base / "home", "cohort": cohort}


def _profile(path: Path, backend: str, options: str, guard: str = "toy-guard") -> Path:
    template = (f'template_lock = "{LOCK}"\ntemplate_file = "template.txt"\n'
                if guard == "toy-guard" else "")
    path.write_text(
        f'name = "toy-{backend}"\nbackend = "{backend}"\n\n'
        f'[guard]\nname = "{guard}"\n{template}\n'
        f'[checkpoint]\nlock = "{LOCK}"\n\n'
        f"[backend_options]\n{options}\n", encoding="utf-8")
    return path


def _records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _run(profile: Path, toy: dict[str, Path], out: Path) -> list[dict[str, Any]]:
    assert main(["run", "--profile", str(profile), "--cohort", str(toy["cohort"]), "--out",
                 str(out), "--home", str(toy["home"]), "--no-progress"]) == 0
    return _records(out)


def test_the_kvloop_backend_gives_the_hf_tokens_at_batch_1(
        kvloop: Backend, toy: dict[str, Path], tmp_path: Path) -> None:
    hf = _run(_profile(tmp_path / "hf.toml", "hf",
                       'batch_size = 1\ndecode_loop = "generate"\nthreads = 1'),
              toy, tmp_path / "hf")
    kv = _run(_profile(tmp_path / "kv.toml", "kvloop", "threads = 1"), toy, tmp_path / "kv")
    assert len(kv) == len(hf) == ROWS
    for a, b in zip(hf, kv, strict=True):
        assert a["row_id"] == b["row_id"]
        assert b["output_token_ids"] == a["output_token_ids"]
        assert len(b["output_token_ids"]) > 8  # a real answer, not an early stop
        for key in ("output_text", "finish_reason", "status", "score", "error_type"):
            assert b[key] == a[key], key
        assert b["decision_margin"] == pytest.approx(a["decision_margin"], abs=1e-4)
        provenance = b["provenance"]
        assert isinstance(provenance, dict) and provenance["backend"] == "kvloop"


def test_the_descriptor_alone_states_what_the_toolkit_knows(
        kvloop: Backend, tmp_path: Path) -> None:
    profile = RunProfile.load(_profile(tmp_path / "kv.toml", "kvloop", "threads = 1"))
    assert profile.descriptor is kvloop
    report = diagnose(profile)  # one request at a time: nothing to batch
    assert report.verdict is not None and report.verdict.verdict == "no-batching"
    assert report.facts.threads == 1 and report.facts.dtype == "float32"
    with pytest.raises(InputError) as info:  # the table is enforced naming the file
        RunProfile.load(_profile(tmp_path / "bad.toml", "kvloop", 'dtype = "int8"'))
    assert (info.value.file, info.value.field) == (str(tmp_path / "bad.toml"),
                                                  "backend_options.dtype")


def test_a_logit_guard_is_refused_from_the_declared_capability(
        kvloop: Backend, tmp_path: Path) -> None:
    from guardrepro.run.resolve import resolve_profile

    logit = [b.name for b in registry.registered() if b.score_logits]
    assert not kvloop.score_logits and logit and "kvloop" not in logit
    profile = RunProfile.load(_profile(tmp_path / "gemma.toml", "kvloop", "",
                                       guard="shieldgemma"))
    with pytest.raises(InputError, match=r"only backend .* returns") as info:
        resolve_profile(profile, home=tmp_path / "home")
    assert info.value.field == "backend"
    assert all(name in str(info.value) for name in logit)


# --- the recipe in a copy of the tree -------------------------------------

COPIED = ("guardrepro", "docs", "tests", "runners", "locks", "cohorts", "pyproject.toml")

NEW_TEST = '''
"""The kvloop backend: known by name, greedy tokens of hf at batch 1."""

from pathlib import Path
from typing import Any

from guardrepro.decoding import DecodingParams
from guardrepro.run.prompts import PromptTokenizer
from guardrepro.run.runners.base import GenerationRequest
from guardrepro.run.runners.registry import backend_of, create_runner

TOY = Path(__file__).resolve().parents[1] / "guardrepro" / "data" / "toy_guard"


def test_kvloop_matches_hf_at_batch_1() -> None:
    tok = PromptTokenizer(TOY)
    prompt = tok.encode_chat("Delete every file?")
    params = DecodingParams(mode="greedy", max_new_tokens=24)
    request = [GenerationRequest("r1", tuple(prompt), None)]
    outputs = []
    for backend, options in (("hf", {"batch_size": 1, "threads": 1}),
                             ("kvloop", {"threads": 1})):
        runner = create_runner(backend_of(backend), TOY, options,
                               eos_token_ids=tok.eos_token_ids,
                               pad_token_id=tok.pad_token_id, decode=tok.decode)
        outputs.append(runner.generate(request, params)[0].token_ids)
        runner.close()
    assert outputs[0] == outputs[1] and len(outputs[0]) > 4
'''


def _python(tree: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_a_backend_is_three_files(tmp_path: Path) -> None:
    pristine = copy_tree(tmp_path / "pristine", COPIED)
    tree = copy_tree(tmp_path / "tree", COPIED)
    # 1. the descriptor and its runner, one module
    shutil.copy2(Path(kvloop_backend.__file__),
                 tree / "guardrepro/run/runners/kvloop_backend.py")
    # 2. its test
    (tree / "tests/test_kvloop_backend.py").write_text(NEW_TEST, encoding="utf-8")
    # 3. its docs line: a row of the table of backends in docs/BACKENDS.md
    backends_md = tree / "docs/BACKENDS.md"
    text = backends_md.read_text(encoding="utf-8")
    end = text.index("\n", text.index("| `rule` |")) + 1
    row = "| `kvloop` | transformers KV-cache loop | `hf` | no |\n"
    backends_md.write_text(text[:end] + row + text[end:], encoding="utf-8")

    assert changed_files(pristine, tree) == {"guardrepro/run/runners/kvloop_backend.py",
                                             "tests/test_kvloop_backend.py", "docs/BACKENDS.md"}
    listed = json.loads(_python(tree, "-c", (
        "import json, sys\nfrom guardrepro.run.runners import registry\n"
        "print(json.dumps({'names': list(registry.RUNNERS), "
        "'runner': registry.RUNNERS['kvloop'], 'torch': 'torch' in sys.modules}))")))
    assert listed == {"names": ["hf", "mlx", "vllm", "rule", "kvloop"],
                      "runner": "guardrepro.run.runners.kvloop_backend:KVLoopRunner",
                      "torch": False}
    _python(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "tests/test_kvloop_backend.py", "tests/test_backend_recipe.py::test_the_table_"
            "of_backends_lists_the_registered_ones")


def test_the_table_of_backends_lists_the_registered_ones() -> None:
    """docs/BACKENDS.md's table of backends: one row per registered descriptor
    (name, label, extra, score logits), read from the descriptors."""
    text = (ROOT / "docs" / "BACKENDS.md").read_text(encoding="utf-8")
    table = text.split("## The backends", 1)[1].split("\n## ", 1)[0]
    rows = {tuple(cell.strip() for cell in line.strip("|").split("|"))
            for line in table.splitlines() if line.startswith("| `")}
    declared = {(f"`{b.name}`", b.label, f"`{b.extra}`" if b.extra else "none",
                 "yes" if b.score_logits else "no") for b in registry.registered()}
    assert rows == declared
