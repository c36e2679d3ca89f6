"""guardrepro quantize: recipes, refusals, mlx-lm conversion, inspection, lock + verify.

Sources are tiny random Qwen2 checkpoints written the way transformers 5
writes them (rope_theta only under rope_parameters, ``dtype`` not
``torch_dtype``), so the config normalisation is exercised for real.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from guardrepro.artifacts.quantize.recipe import load_recipe
from guardrepro.errors import InputError, IntegrityError

pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'guardrepro[mlx]')")
pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pip install 'guardrepro[mlx]')")

from mlx_tiny import build_source

from guardrepro.artifacts.quantize.convert import (
    QuantPlan,
    inspect_artifact,
    normalize_mlx_config,
    quantize,
)
from guardrepro.cli import cli

pytestmark = pytest.mark.mlx
REPO = Path(__file__).resolve().parents[1]
Q8 = REPO / "quantize" / "q8-g64.toml"
BF16 = REPO / "quantize" / "bf16.toml"

# The tiny model (hidden 128, 2 heads of 64, 1 kv head, intermediate 384, 2 layers, tied
# embeddings): mlx-lm quantizes every Linear and the Embedding. By hand:
QUANTIZED = sorted(
    ["model.embed_tokens.weight"]
    + [f"model.layers.{i}.{m}.weight" for i in range(2) for m in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
)
NOT_QUANTIZED = sorted(
    ["model.norm.weight"]
    + [f"model.layers.{i}.{t}" for i in range(2) for t in (
        "input_layernorm.weight", "post_attention_layernorm.weight",
        "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias")]
)


@pytest.fixture(scope="module")
def bf16_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_source(tmp_path_factory.mktemp("src") / "tiny", dtype="bfloat16")


def _digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir())}


def test_q8_twice_same_tree_hash_and_lock_verifies(bf16_source: Path, tmp_path: Path) -> None:
    from guardrepro.artifacts.treehash import tree_hash
    from guardrepro.artifacts.verify import verify_lock

    before = _digests(bf16_source)
    one = quantize(Q8, bf16_source, tmp_path / "one", unpinned=True)
    two = quantize(Q8, bf16_source, tmp_path / "two", unpinned=True)
    assert one.tree_sha256 == two.tree_sha256
    assert tree_hash(tmp_path / "one").sha256 == one.tree_sha256
    assert _digests(bf16_source) == before  # the source (hardlinked in staging) is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "one", "one.lock.toml", "one.quantize.json", "two", "two.lock.toml", "two.quantize.json"]

    report = verify_lock(one.lock_path)
    assert report.ok, [f.describe() for f in report.problems]
    assert report.tree is not None and report.tree.observed is not None
    assert report.tree.observed.sha256 == one.tree_sha256

    # one flipped byte inside the weights: verify fails and names the file
    weights = tmp_path / "one" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    bad = verify_lock(one.lock_path)
    assert not bad.ok
    assert [f.path for f in bad.problems] == ["model.safetensors"]
    with pytest.raises(IntegrityError, match=r"model\.safetensors"):
        bad.raise_for_status()


def test_q8_artifact_config_and_weight_lists(bf16_source: Path, tmp_path: Path) -> None:
    import mlx.core as mx

    result = quantize(Q8, bf16_source, tmp_path / "q8", unpinned=True)
    config = json.loads((tmp_path / "q8" / "config.json").read_text())
    assert config["quantization"] == {"group_size": 64, "bits": 8, "mode": "affine"}
    # normalised in staging: mlx-lm would otherwise use its own rope default (1e6)
    assert config["rope_theta"] == 10000.0 and config["torch_dtype"] == "bfloat16"
    assert result.config_changes == ["rope_theta=10000.0 (from rope_parameters)",
                                     "torch_dtype='bfloat16' (from dtype)"]
    assert result.quantized == QUANTIZED
    assert result.not_quantized == NOT_QUANTIZED
    prov = json.loads((tmp_path / "q8.quantize.json").read_text())
    assert prov["quantized_weights"] == QUANTIZED
    assert prov["source"]["pinned"] is False
    assert prov["versions"]["mlx-lm"] and prov["recipe"]["bits"] == 8
    lock_text = (tmp_path / "q8.lock.toml").read_text()
    assert "[UNPINNED]" in lock_text and "quantized weights: 15" in lock_text
    # shapes by hand: q_proj is 128 -> 128: 128 * 8 / 32 = 32 packed uint32, 128/64 = 2 groups
    weights = mx.load(str(tmp_path / "q8" / "model.safetensors"))
    assert weights["model.layers.0.self_attn.q_proj.weight"].shape == (128, 32)
    assert weights["model.layers.0.self_attn.q_proj.scales"].shape == (128, 2)
    assert weights["model.layers.0.mlp.down_proj.scales"].shape == (128, 6)  # 384 / 64
    assert weights["model.norm.weight"].dtype == mx.bfloat16


def test_bf16_recipe_quantizes_nothing(bf16_source: Path, tmp_path: Path) -> None:
    import mlx.core as mx

    result = quantize(BF16, bf16_source, tmp_path / "bf", unpinned=True)
    assert result.quantized == []
    config = json.loads((tmp_path / "bf" / "config.json").read_text())
    assert "quantization" not in config
    weights = mx.load(str(tmp_path / "bf" / "model.safetensors"))
    assert not [k for k in weights if k.endswith(".scales")]
    assert {v.dtype for v in weights.values()} == {mx.bfloat16}


def test_refuses_model_that_does_not_fit_the_group_size(tmp_path: Path) -> None:
    # intermediate 352 = 5.5 * 64: down_proj's input is not divisible by group 64
    src = build_source(tmp_path / "odd", dtype="bfloat16", intermediate_size=352)
    with pytest.raises(InputError, match=r"down_proj \(input 352\)") as info:
        quantize(Q8, src, tmp_path / "out", unpinned=True)
    assert "group size 64" in str(info.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.lock.toml").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["odd"]  # no staging left behind


def test_inspection_catches_mlx_lm_silent_skip(tmp_path: Path) -> None:
    """Run mlx-lm's converter directly on the non-divisible model: it skips down_proj
    silently while config.json still claims Q8; the inspection must refuse it."""
    from mlx_lm.convert import convert

    src = build_source(tmp_path / "odd", dtype="bfloat16", intermediate_size=352)
    config = json.loads((src / "config.json").read_text())
    normalized, _ = normalize_mlx_config(config)
    (src / "config.json").write_text(json.dumps(normalized))
    raw = tmp_path / "raw"
    convert(str(src), str(raw), quantize=True, q_group_size=64, q_bits=8, dtype="bfloat16")
    assert json.loads((raw / "config.json").read_text())["quantization"]["bits"] == 8
    dims = {"model.embed_tokens": 128}
    for i in range(2):
        for m in ("q_proj", "k_proj", "v_proj", "o_proj"):
            dims[f"model.layers.{i}.self_attn.{m}"] = 128
        dims[f"model.layers.{i}.mlp.gate_proj"] = 128
        dims[f"model.layers.{i}.mlp.up_proj"] = 128
        dims[f"model.layers.{i}.mlp.down_proj"] = 352
    plan = QuantPlan(quantize=dims, in_dims=dims)
    with pytest.raises(IntegrityError, match=r"model.layers.0.mlp.down_proj was not quantized"):
        inspect_artifact(raw, load_recipe(Q8), plan)


def test_refuses_unpinned_dir_and_wrong_source_dtype(bf16_source: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--unpinned"):
        quantize(Q8, bf16_source, tmp_path / "a")
    fp32 = build_source(tmp_path / "fp32", dtype="float32")
    with pytest.raises(InputError, match="needs a bfloat16 source"):
        quantize(Q8, fp32, tmp_path / "b", unpinned=True)
    (tmp_path / "exists").mkdir()
    with pytest.raises(InputError, match="already exists"):
        quantize(Q8, bf16_source, tmp_path / "exists", unpinned=True)


@pytest.mark.parametrize(("text", "field"), [
    ("bits = 7", "recipe.bits"),
    ("group_size = 16", "recipe.group_size"),
    ('mode = "nf4"', "recipe.mode"),
    ("colour = 1", "recipe.colour"),
])
def test_recipe_validation(tmp_path: Path, text: str, field: str) -> None:
    base = {"bits": "bits = 8", "group_size": "group_size = 64", "mode": 'mode = "affine"'}
    key = text.split(" =")[0]
    base[key] = text
    lines = ["[recipe]", 'name = "t"', "quantize = true", 'dtype = "bfloat16"',
             'source_dtype = "any"', *base.values()]
    path = tmp_path / "r.toml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as info:
        load_recipe(path)
    assert info.value.field == field and info.value.file == str(path)


def test_shipped_recipes_parse() -> None:
    q8 = load_recipe(Q8)
    assert (q8.bits, q8.group_size, q8.mode, q8.dtype) == (8, 64, "affine", "bfloat16")
    published = q8.expected_for(revision="ad2f82df3ae3e0dcdaed7b7c71e8b7f0b16ead7a",
                                source_tree_sha256=None)
    assert published is not None
    assert published.tree_sha256.startswith("913afe8cc195fc5d")
    assert (published.files, published.bytes) == (9, 8103477380)
    assert load_recipe(BF16).quantization is None
    assert load_recipe(REPO / "quantize" / "q4-g64.toml").bits == 4
    assert load_recipe(REPO / "quantize" / "q8-g64-f32.toml").dtype == "float32"


def test_cli_from_a_lock_reports_expected_match_and_mismatch(
    bf16_source: Path, tmp_path: Path
) -> None:
    """Source pinned by a lock (verified by fetch.materialize); the recipe carries an
    expected tree hash for this source: first a wrong one (MISMATCH, exit 0), then the
    one we just produced (MATCH)."""
    from guardrepro.artifacts.locks import LocalSource, Lock, LockedFile, save_lock
    from guardrepro.artifacts.treehash import tree_hash

    files = tuple(
        LockedFile(path=p.name, sha256=hashlib.sha256(p.read_bytes()).hexdigest(),
                   size=p.stat().st_size)
        for p in sorted(bf16_source.iterdir()))
    src_tree = tree_hash(bf16_source)
    lock_path = tmp_path / "tiny.lock.toml"
    save_lock(Lock(name="tiny", kind="checkpoint",
                   source=LocalSource(path=str(bf16_source), tree_sha256=src_tree.sha256),
                   files=files), lock_path)

    def recipe(tree: str) -> Path:
        path = tmp_path / f"r-{tree[:4]}.toml"
        path.write_text(Q8.read_text() + "\n[[expected]]\nmodel = \"tiny\"\n"
                        f'source_tree_sha256 = "{src_tree.sha256}"\ntree_sha256 = "{tree}"\n')
        return path

    env = {"GUARDREPRO_HOME": str(tmp_path / "home")}
    runner = CliRunner()
    first = runner.invoke(cli, ["quantize", "--recipe", str(recipe("0" * 64)), "--model",
                                str(lock_path), "--out", str(tmp_path / "a")], env=env)
    assert first.exit_code == 0, first.output
    assert "MISMATCH" in first.output and "0" * 64 in first.output
    produced = tree_hash(tmp_path / "a").sha256
    assert f"tree hash  {produced}" in first.output
    prov = json.loads((tmp_path / "a.quantize.json").read_text())
    assert prov["source"]["pinned"] is True and prov["source"]["tree_sha256"] == src_tree.sha256
    second = runner.invoke(cli, ["quantize", "--recipe", str(recipe(produced)), "--model",
                                 str(lock_path), "--out", str(tmp_path / "b")], env=env)
    assert second.exit_code == 0, second.output
    assert "MATCH" in second.output and "MISMATCH" not in second.output
    verify = runner.invoke(cli, ["verify", str(tmp_path / "b.lock.toml")], env=env)
    assert verify.exit_code == 0, verify.output


TOY = REPO / "guardrepro" / "data" / "toy_guard"


def test_toy_guard_q8_twice_same_tree_hash_and_verifies(tmp_path: Path) -> None:
    """The shipped toy guard through its package lock (fetched into a temporary cache):
    bf16; hidden 256, 4 layers, intermediate 768, vocab 2048 (every dimension divisible
    by 64), so 4 * 7 linear weights + the embedding are quantized. The q8-g64 recipe
    pins the tree hash measured for it; with the same mlx / mlx-lm / transformers it
    must match (a stale pin after retraining the toy guard shows up here)."""
    import importlib.metadata

    from guardrepro.artifacts.fetch import fetch_lock
    from guardrepro.artifacts.verify import verify_lock

    lock = REPO / "locks" / "toy-guard.toml"
    home = tmp_path / "home"
    fetch_lock(lock, home=home, progress=False)
    one = quantize(Q8, lock, tmp_path / "one", home=home)
    two = quantize(Q8, lock, tmp_path / "two", home=home)
    assert one.tree_sha256 == two.tree_sha256
    assert one.source.pinned and one.source.repo == "toy-guard"
    assert len(one.quantized) == 29 and "model.embed_tokens.weight" in one.quantized
    config = json.loads((tmp_path / "one" / "config.json").read_text())
    assert config["quantization"] == {"group_size": 64, "bits": 8, "mode": "affine"}
    assert one.expected is not None, "q8-g64.toml has no entry for the shipped toy guard"
    versions = (importlib.metadata.version("mlx"), importlib.metadata.version("mlx-lm"),
                importlib.metadata.version("transformers"))
    if versions == (one.expected.mlx, one.expected.mlx_lm, "5.24.0"):
        assert one.expected_match, (one.tree_sha256, one.expected.tree_sha256)
    assert verify_lock(one.lock_path).ok
    tokenizer = tmp_path / "one" / "tokenizer.json"
    tokenizer.write_bytes(tokenizer.read_bytes().replace(b"{", b"[", 1))
    bad = verify_lock(one.lock_path)
    assert [f.path for f in bad.problems] == ["tokenizer.json"]


def test_stage_source_links_files_copies_config_and_refuses_symlinks(tmp_path: Path) -> None:
    from guardrepro.artifacts.quantize.convert import stage_source
    from guardrepro.errors import UnsafePathError

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text("{}")
    (src / "model.safetensors").write_bytes(b"w")
    (src / "sub" / "extra.txt").write_text("x")
    (src / "modeling_x.py").write_text("raise SystemExit(1)\n")
    staged = tmp_path / "staged"
    # only weights, config, tokenizer and template files; never code, never subdirs
    assert stage_source(src, staged) == ["config.json", "model.safetensors"]
    # weights share the inode; config.json is a private copy (rewritten later)
    assert (staged / "model.safetensors").stat().st_ino == (src / "model.safetensors").stat().st_ino
    assert (staged / "config.json").stat().st_ino != (src / "config.json").stat().st_ino
    (src / "link.json").symlink_to(src / "config.json")
    with pytest.raises(UnsafePathError, match="symlink"):
        stage_source(src, tmp_path / "staged2")


def _tiny_config(model_type: str, **extra: object) -> dict[str, object]:
    """A small config as transformers 5 writes it (rope_theta nested)."""
    import transformers

    cls = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config,
           "llama": transformers.LlamaConfig, "gemma": transformers.GemmaConfig,
           "gemma2": transformers.Gemma2Config}[model_type]
    settings: dict[str, object] = dict(vocab_size=64, hidden_size=128, intermediate_size=256,
                                       num_hidden_layers=1, num_attention_heads=2,
                                       num_key_value_heads=1, head_dim=64,
                                       max_position_embeddings=512, rope_theta=10000.0)
    settings.update(extra)
    return cls(**settings).to_dict()


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3", "llama", "gemma", "gemma2"])
def test_normalisation_per_architecture_accepts_tiny_configs(model_type: str) -> None:
    extra: dict[str, object] = {}
    if model_type == "gemma":
        extra["hidden_activation"] = "gelu"
    if model_type == "gemma2":
        extra["sliding_window"] = 512
    config = _tiny_config(model_type, **extra)
    normalized, changes = normalize_mlx_config(config)
    assert normalized["rope_theta"] == 10000.0
    if "rope_theta" not in config:
        assert any(c.startswith("rope_theta=") for c in changes)


def test_qwen3_reads_head_dim_but_qwen2_does_not() -> None:
    # Qwen3Guard-0.6B: hidden 1024 / 16 heads = 64, head_dim 128
    real = {"num_attention_heads": 16, "hidden_size": 1024, "head_dim": 128}
    qwen3 = _tiny_config("qwen3", **real)
    normalized, _ = normalize_mlx_config(qwen3)
    assert normalized["head_dim"] == 128
    with pytest.raises(InputError,
                       match=r"head_dim: 128 != hidden_size/num_attention_heads \(64\)"):
        normalize_mlx_config(_tiny_config("qwen2", **real))
    no_head = dict(qwen3)
    no_head.pop("head_dim")
    with pytest.raises(InputError, match="head_dim: missing"):
        normalize_mlx_config(no_head)


def test_architecture_specific_refusals() -> None:
    with pytest.raises(InputError, match="hidden_activation"):  # tanh GELU vs mlx-lm's exact
        normalize_mlx_config(_tiny_config("gemma", hidden_activation="gelu_pytorch_tanh"))
    with pytest.raises(InputError, match="sliding_window"):
        normalize_mlx_config(_tiny_config("gemma2", sliding_window=128))
    gemma2 = _tiny_config("gemma2", sliding_window=512)
    gemma2.pop("query_pre_attn_scalar")
    with pytest.raises(InputError, match="query_pre_attn_scalar"):
        normalize_mlx_config(gemma2)
    llama = _tiny_config("llama")
    llama.pop("rope_parameters", None)
    llama.pop("rope_theta", None)
    with pytest.raises(InputError, match="rope_theta"):
        normalize_mlx_config(llama)
    with pytest.raises(InputError, match="model_type"):
        normalize_mlx_config({**_tiny_config("llama"), "model_type": "phi3"})
