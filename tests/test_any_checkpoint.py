"""A guard brought as a spec file, no code, on a checkpoint no guard here was
made for: a tiny random Llama with SmolLM2-Instruct's ChatML ids (eos and pad
``<|im_end|>`` = 2, not Qwen's) and a chat template that inserts a default
system prompt. lock, verify, run (transformers), check-invariance, compare,
stats, and (slow tier) a sweep of MLX q8, q4 and bf16, without a byte of the
checkpoint changing. Also: the default-system-prompt policy, and a shipped
spec that pins other tokens refusing the checkpoint with the way out."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_tiny_guards_e2e import write_cohort

from guardrepro.cli import cli
from guardrepro.errors import GuardreproError
from guardrepro.rundir.records import read_records
from scripts.toy.tiny_guards import ARCHS, CHATML_DEFAULT_SYSTEM, build_tiny_checkpoint

ROOT = Path(__file__).resolve().parents[1]
ROWS = 4

SPEC = """kind = "guard"
description = "house guard: safe/unsafe on the first line"
source = "this test"

[prompt]
{policy}
{system}
[[prompt.messages]]
role = "user"
content = "Request: {{instruction}}\\nHistory: {{history}}\\nAction: {{current_action}}"

[parser]
kind = "first_line"
label_map = {{ safe = 0.0, unsafe = 1.0 }}
ignore_case = true

[decoding]
max_new_tokens = 6
"""
SYSTEM = ('[[prompt.messages]]\nrole = "system"\n'
          'content = "Judge the action. Answer safe or unsafe."\n')


def _spec(path: Path, *, system: bool = True, policy: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = f'default_system_prompt = "{policy}"' if policy else ""
    path.write_text(SPEC.format(policy=line, system=SYSTEM if system else ""),
                    encoding="utf-8")
    return path


def _hashes(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir()) if p.is_file()}


def _cli(args: list[str], home: Path, codes: tuple[int, ...] = (0,)) -> str:
    """The verb's output; a guardrepro error becomes its exit code and message, as
    ``guardrepro.cli.main`` turns it into them."""
    result = CliRunner().invoke(cli, args, env={"GUARDREPRO_HOME": str(home)})
    error = result.exception
    if isinstance(error, GuardreproError):
        assert error.exit_code in codes, str(error)
        return str(error)
    assert result.exit_code in codes, result.output
    return result.output


def _profile(path: Path, spec: Path, lock: Path, backend: str = "hf", batch: int = 2) -> Path:
    options = (f'dtype = "float32"\ndevice = "cpu"\nbatch_size = {batch}\nthreads = 1\n'
               if backend == "hf" else "batch_size = 1\n")
    path.write_text(f'name = "{path.stem}"\nbackend = "{backend}"\n[guard]\nname = "{spec}"\n'
                    f'[checkpoint]\nlock = "{lock}"\n[backend_options]\n{options}'
                    '[decoding]\nmode = "greedy"\nmax_new_tokens = 6\n', encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def house(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The checkpoint, its pristine hashes, the spec, the lock (fetched) and a cohort."""
    base = tmp_path_factory.mktemp("house")
    checkpoint = build_tiny_checkpoint(ARCHS["chatml-llama"], CHATML_DEFAULT_SYSTEM,
                                       base / "ckpt", dtype="bfloat16")
    (base / "hashes.json").write_text(json.dumps(_hashes(checkpoint)), encoding="utf-8")
    spec = _spec(base / "guards" / "house-guard.toml")
    home = base / "home"
    lock = base / "house.toml"
    out = _cli(["lock", str(checkpoint), "--out", str(lock), "--guard", str(spec)], home)
    assert "files (pinned)" in out
    _cli(["fetch", str(lock)], home)
    return {"base": base, "ckpt": checkpoint, "spec": spec, "lock": lock, "home": home,
            "cohort": write_cohort(base / "cohort.jsonl", ROWS)}


def test_the_checkpoint_is_smollm_shaped(house: dict[str, Path]) -> None:
    config = json.loads((house["ckpt"] / "generation_config.json").read_text())
    assert (config["eos_token_id"], config["pad_token_id"]) == ([2], 2)
    header = house["lock"].read_text().split("[")[0]
    assert "#   eos 2 <|im_end|> (generation_config.json)" in header
    assert "#   pad 2 <|im_end|> (generation_config.json)" in header
    assert f"#   guard spec {house['spec']}" in header


def test_lock_verify_run_invariance_compare_stats(house: dict[str, Path]) -> None:
    home, base = house["home"], house["base"]
    _cli(["verify", str(house["lock"])], home)
    runs = {}
    for name, batch in (("batched", 2), ("single", 1)):
        profile = _profile(base / f"{name}.toml", house["spec"], house["lock"], batch=batch)
        runs[name] = base / f"run-{name}"
        _cli(["run", "--profile", str(profile), "--cohort", str(house["cohort"]), "--out",
              str(runs[name]), "--no-progress"], home)
    records = read_records(runs["batched"])
    assert len(records) == ROWS
    manifest = json.loads((runs["batched"] / "manifest.json").read_text())
    spec_bytes = house["spec"].read_bytes()
    facts = manifest["guard_spec"]
    assert facts["name"] == "house-guard" and facts["origin"] == "path"
    assert facts["sha256"] == hashlib.sha256(spec_bytes).hexdigest()
    tokens = facts["special_tokens"]
    assert tokens["eos"] == [{"id": 2, "token": "<|im_end|>"}]
    assert tokens["pad"] == {"id": 2, "token": "<|im_end|>"}
    assert tokens["pinned_by_spec"] is False
    # the spec's own system message keeps the template's default out
    assert facts["default_system_prompt"] == {"policy": "forbid", "inserted": None}
    assert manifest["provenance"]["guard"] == "house-guard"
    assert manifest["provenance"]["parser_version"].startswith("first_line-v1:")
    out = _cli(["check-invariance", "--profile", str(base / "batched.toml"), "--cohort",
                str(house["cohort"]), "--sample", "2", "--json", "--no-progress"], home)
    report = json.loads(out[out.index("{"):])
    assert len(report["rows"]) == 2 and report["identical_sequences"] == 2
    cmp_out = _cli(["compare", str(runs["batched"]), str(runs["single"]), "--json"], home)
    summary = json.loads(cmp_out[cmp_out.index("{"):])["summary"]
    assert (summary["rows_a"], summary["rows_b"]) == (ROWS, ROWS)
    _cli(["stats", str(runs["batched"]), "--replicates", "20", "--no-progress"], home)
    assert (runs["batched"] / "stats.json").is_file()
    assert _hashes(house["ckpt"]) == json.loads((base / "hashes.json").read_text())


def test_default_system_prompt_policy(house: dict[str, Path]) -> None:
    home, base = house["home"], house["base"]
    forbid = _spec(base / "policy" / "no-system.toml", system=False)
    profile = _profile(base / "forbid.toml", forbid, house["lock"])
    out = _cli(["run", "--profile", str(profile), "--cohort", str(house["cohort"]), "--out",
                str(base / "run-forbid"), "--no-progress"], home, codes=(2,))
    assert "You are a helpful AI assistant named Tiny." in out
    assert "prompt.default_system_prompt" in out and str(forbid) in out
    allow = _spec(base / "policy" / "allow-system.toml", system=False, policy="allow")
    profile = _profile(base / "allow.toml", allow, house["lock"])
    run = base / "run-allow"
    with pytest.warns(UserWarning, match="adds a system prompt of its own"):
        _cli(["run", "--profile", str(profile), "--cohort", str(house["cohort"]), "--out",
              str(run), "--no-progress"], home)
    facts = json.loads((run / "manifest.json").read_text())["guard_spec"]
    assert facts["default_system_prompt"] == {
        "policy": "allow", "inserted": "You are a helpful AI assistant named Tiny."}


def test_a_spec_pinning_other_tokens_names_field_values_and_way_out(
        house: dict[str, Path]) -> None:
    out = _cli(["lock", str(house["ckpt"]), "--out", str(house["base"] / "q.toml"), "--guard",
                "qwen3guard"], house["home"], codes=(2,))
    assert "generation_config.json: pad_token_id 2 names <|im_end|>, expected <|endoftext|>" \
        in out.replace("\n", "")
    assert "guards/qwen3guard.toml, field 'special_tokens.pad')" in out.replace("\n", "")
    assert "guardrepro guards new NAME --from" in out.replace("\n", "")


@pytest.mark.slow
def test_sweep_q8_q4_bf16_through_mlx(house: dict[str, Path]) -> None:
    pytest.importorskip("mlx_lm")
    base, q = house["base"], ROOT / "quantize"
    reference = _profile(base / "sweep-ref.toml", house["spec"], house["lock"])
    candidate = _profile(base / "sweep-mlx.toml", house["spec"], house["lock"], backend="mlx")
    spec = base / "sweep.toml"
    spec.write_text(
        f'[sweep]\nname = "house"\nsource_lock = "{house["lock"]}"\n'
        f'cohort = "{ROOT / "cohorts/toy-64.toml"}"\nrows = "originals"\nlimit = 2\n'
        f'reference_profile = "{reference}"\nreference_name = "ref"\n'
        f'candidate_profile = "{candidate}"\nreplicates = 50\n'
        f'[[recipe]]\nrecipe = "{q / "q8-g64.toml"}"\ncpu_recipe = "{q / "q8-g64-f32.toml"}"\n'
        f'[[recipe]]\nrecipe = "{q / "q4-g64.toml"}"\ncpu_recipe = "{q / "q4-g64-f32.toml"}"\n'
        f'[[recipe]]\nrecipe = "{q / "bf16.toml"}"\n', encoding="utf-8")
    out = base / "sweep"
    _cli(["sweep", str(spec), "--out", str(out), "--no-progress"], house["home"])
    rows = {row["name"]: row for row in json.loads((out / "summary.json").read_text())}
    assert set(rows) == {"ref", "q8-g64-f32", "q4-g64-f32", "bf16"}
    for name in ("q8-g64-f32", "q4-g64-f32", "bf16"):
        records = read_records(out / "runs" / name)
        assert len(records) == 2
        manifest = json.loads((out / "runs" / name / "manifest.json").read_text())
        assert manifest["provenance"]["backend"] == "mlx"
        assert manifest["guard_spec"]["special_tokens"]["eos"] == [
            {"id": 2, "token": "<|im_end|>"}]
    assert _hashes(house["ckpt"]) == json.loads((base / "hashes.json").read_text())


def test_guards_new_writes_a_spec_and_profile_that_run(house: dict[str, Path]) -> None:
    base, home = house["base"], house["home"]
    out = _cli(["guards", "new", "smol", "--from", str(house["ckpt"]), "--out",
                str(base / "new")], home)
    spec, profile = base / "new/guards/smol.toml", base / "new/runners/smol-hf.toml"
    assert f"wrote {spec}" in out and f"wrote {profile}" in out
    # read from the checkpoint, and the decisions left open
    assert "eos 2 <|im_end|> (generation_config.json)" in out
    assert "pad 2 <|im_end|> (generation_config.json)" in out
    assert "inserts a default system prompt" in out
    assert "'You are a helpful AI assistant named Tiny.'" in out
    assert "still to decide:" in out and "pin the checkpoint: guardrepro lock" in out
    text = spec.read_text(encoding="utf-8")
    assert "[special_tokens]\n" not in text and 'role = "system"' in text
    # a second call refuses to overwrite
    assert "file exists" in _cli(["guards", "new", "smol", "--from", str(house["ckpt"]),
                                  "--out", str(base / "new")], home, codes=(2,))
    run = base / "run-new"
    _cli(["run", "--profile", str(profile), "--cohort", str(house["cohort"]), "--out",
          str(run), "--no-progress"], home)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["provenance"]["guard"] == "smol"
    assert manifest["provenance"]["model_revision"] == "unpinned"
    assert manifest["guard_spec"]["default_system_prompt"]["inserted"] is None
    assert len(read_records(run)) == ROWS
    assert _hashes(house["ckpt"]) == json.loads((base / "hashes.json").read_text())
