"""Convert a verified checkpoint into an MLX artifact with mlx-lm, then pin it.

Input: a recipe (``quantize/*.toml``, see ``guardrepro.artifacts.quantize.recipe``), a
source checkpoint given as a lock file (materialized and verified through
``guardrepro.artifacts.fetch``) or, only with ``unpinned=True``, a plain directory; an
output directory that must not exist.

Output: the artifact directory (written whole or not at all: converted into a
temporary sibling, checked, then renamed) and a lock beside it
(``<out>.lock.toml``) pinning every file by sha256 and size plus the tree
hash, recording the recipe, the mlx / mlx-lm versions, the source and which
weights were and were not quantized. ``guardrepro verify`` accepts it.

Invariants (the silent failures listed in docs/BACKENDS.md are turned into errors):
- the source config is normalised in a private staging copy (top-level
  ``rope_theta`` from ``rope_parameters``, ``torch_dtype`` from ``dtype``);
  the source itself is never modified (staged files are hardlinks or copies,
  and ``config.json`` is always rewritten as a new file);
- a recipe that does not fit the model (any quantizable weight whose input
  dimension is not divisible by the group size) is refused before converting;
- after conversion every weight that should be quantized has ``.scales`` and
  ``.biases`` of the right shapes and dtype, and every other floating tensor
  has the recipe dtype; anything else is an ``IntegrityError``;
- a tree hash different from the recipe's published one is reported, not
  raised (a different mlx-lm version legitimately changes bytes);
- only weights, config, tokenizer and template files are staged (never the
  source's ``*.py``), so only they can reach the artifact;
- a staging directory (``.<out>.staging-<pid>-*``) left by a killed conversion
  is removed by the next conversion into the same parent directory.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.artifacts.quantize import pin
from guardrepro.artifacts.quantize.recipe import Recipe, load_recipe
from guardrepro.artifacts.quantize.result import QuantizeResult, SourceInfo
from guardrepro.artifacts.safetensors_header import check_safetensors
from guardrepro.artifacts.store import (
    atomic_write_bytes,
    output_error,
    remove_stale_dirs,
    walk_files,
)
from guardrepro.errors import InputError, IntegrityError, OutputError, missing_extra
from guardrepro.logs import capture_stdout
from guardrepro.versions import package_versions

Progress = Callable[[str], None]

_SAFETENSORS_FLOAT = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}


def _noop(_: str) -> None:
    return None


def mlx_versions() -> dict[str, str]:
    """mlx and mlx-lm versions (the artifact's bytes depend on both)."""
    out = package_versions(("mlx", "mlx-lm"))
    for name in ("mlx", "mlx-lm"):
        if name not in out:
            raise missing_extra("quantization", name, "mlx")
    return out


# ---------------------------------------------------------------- config


def normalize_mlx_config(config: Mapping[str, Any], *, file: str = "config.json"
                         ) -> tuple[dict[str, Any], list[str]]:
    """Return the config mlx-lm needs and the list of changes made.

    transformers 5 nests ``rope_theta`` in ``rope_parameters`` and writes
    ``dtype``; mlx-lm reads only a top-level ``rope_theta`` (defaulting to
    1e6 for Qwen2: silently wrong) and ``torch_dtype``. Settings mlx-lm's
    model for the architecture cannot honour are refused rather than
    ignored (``runners.mlx_config``: qwen2, qwen3, llama, gemma, gemma2).
    """
    out = dict(config)
    changes: list[str] = []
    rope = out.get("rope_parameters")
    if rope is not None and not isinstance(rope, Mapping):
        raise InputError("expected an object", file=file, field="rope_parameters")
    rope = dict(rope or {})
    if "rope_theta" in rope:
        if "rope_theta" not in out:
            out["rope_theta"] = rope["rope_theta"]
            changes.append(f"rope_theta={rope['rope_theta']!r} (from rope_parameters)")
        elif float(out["rope_theta"]) != float(rope["rope_theta"]):
            raise InputError(
                f"top-level rope_theta {out['rope_theta']!r} disagrees with "
                f"rope_parameters.rope_theta {rope['rope_theta']!r}", file=file,
                field="rope_theta")
    rope_type = rope.get("rope_type", "default")
    if rope_type not in ("default", None) and "rope_scaling" not in out:
        raise InputError(f"rope_parameters.rope_type {rope_type!r} has no top-level "
                         "rope_scaling that mlx-lm would read", file=file,
                         field="rope_parameters.rope_type")
    dtype, torch_dtype = out.get("dtype"), out.get("torch_dtype")
    if dtype is not None and torch_dtype is not None and dtype != torch_dtype:
        raise InputError(f"dtype {dtype!r} disagrees with torch_dtype {torch_dtype!r}",
                         file=file, field="torch_dtype")
    if torch_dtype is None and dtype is not None:
        out["torch_dtype"] = dtype
        changes.append(f"torch_dtype={dtype!r} (from dtype)")
    from guardrepro.artifacts.mlx_config import architecture_problems

    problems = architecture_problems(out)
    if problems:
        field, message = problems[0]
        more = f" (and {len(problems) - 1} more: {', '.join(f for f, _ in problems[1:])})" \
            if len(problems) > 1 else ""
        raise InputError(f"{field}: {message}{more}", file=file, field=field)
    return out, changes


def safetensors_dtypes(directory: Path) -> dict[str, str]:
    """Tensor name -> safetensors dtype code (``"BF16"``, ``"F32"`` ...), read
    with the safetensors library from the file headers only (no tensor data)."""
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError as exc:  # pragma: no cover - safetensors comes with mlx-lm
        raise missing_extra("reading weights", "safetensors", "mlx") from exc
    out: dict[str, str] = {}
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise InputError("no *.safetensors weights", file=str(directory))
    for path in files:
        check_safetensors(path)  # a lying header is named before the library reads it
        try:
            with safe_open(str(path), framework="numpy") as fh:
                for name in fh.keys():  # noqa: SIM118 - safe_open has no __iter__
                    out[name] = str(fh.get_slice(name).get_dtype())
        except (SafetensorError, OSError) as exc:
            raise InputError(f"bad safetensors file: {exc}", file=str(path)) from exc
    return out


# ---------------------------------------------------------------- staging


# Weights, config, tokenizer and template files: all an MLX artifact is built from.
# Anything else (``*.py`` above all) stays out of staging, so mlx-lm cannot copy it.
STAGED_PATTERNS = (
    "*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json",
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
    "added_tokens.json", "vocab.json", "merges.txt", "chat_template.json",
    "chat_template.jinja", "template.txt",
)  # fmt: skip


def _staged(rel: str) -> bool:
    return "/" not in rel and any(Path(rel).match(pattern) for pattern in STAGED_PATTERNS)


def stage_source(source: Path, staging: Path) -> list[str]:
    """Mirror the weights, config, tokenizer and template files of ``source`` into
    ``staging`` (``STAGED_PATTERNS``; top level only): hardlinks (symlinks across
    filesystems), a private copy of ``config.json``. Symlinks inside the source are
    refused. Returns the staged names."""
    names: list[str] = []
    staging.mkdir(parents=True, exist_ok=True)
    for rel, path in walk_files(source):  # sorted; UnsafePathError on a symlink
        if not _staged(rel):
            continue
        target = staging / rel
        if rel == "config.json":
            shutil.copyfile(path, target)  # rewritten later: never share an inode with it
        else:
            try:
                os.link(path, target)
            except OSError:  # another filesystem: read-only use, so a link is enough
                target.symlink_to(path.resolve())
        names.append(rel)
    return names


STAGING_TAG = ".staging-"


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    # atomic_write_bytes replaces the name, so a hardlinked original is untouched
    atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


# ---------------------------------------------------------------- plan / inspect


@dataclass(frozen=True)
class QuantPlan:
    """Weights mlx-lm should quantize (module path -> input dimension)."""

    quantize: dict[str, int]
    in_dims: dict[str, int]


def plan_quantization(staging: Path, recipe: Recipe) -> QuantPlan:
    """Build the model lazily as mlx-lm will and decide what must be quantized.

    A module is quantizable when mlx-lm's quantizer would consider it (it has
    ``to_quantized``) and the model's own predicate, if any, allows it. Any
    quantizable weight whose input size is not divisible by the group size is
    a refusal: mlx-lm would skip it silently while the config claims it.
    """
    import mlx.nn as nn
    from mlx_lm.utils import load_model

    model, _ = load_model(staging, lazy=True)
    predicate = getattr(model, "quant_predicate", None)
    in_dims: dict[str, int] = {}
    plan: dict[str, int] = {}
    bad: list[str] = []
    for path, module in model.named_modules():
        if not hasattr(module, "to_quantized") or not isinstance(module, nn.Module):
            continue
        weight = getattr(module, "weight", None)
        if weight is None:
            continue
        in_dim = int(weight.shape[-1])
        in_dims[path] = in_dim
        if not recipe.quantize:
            continue
        if predicate is not None and predicate(path, module) is False:
            continue
        assert recipe.group_size is not None
        if in_dim % recipe.group_size != 0:
            bad.append(f"{path} (input {in_dim})")
        plan[path] = in_dim
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise InputError(
            f"recipe {recipe.name!r} does not fit this model: group size {recipe.group_size} "
            f"does not divide the input dimension of {shown}; mlx-lm would leave them "
            "unquantized silently", field="group_size")
    return QuantPlan(quantize=dict(sorted(plan.items())), in_dims=in_dims)


@dataclass(frozen=True)
class Inspection:
    quantized: list[str]
    not_quantized: list[str]
    tensor_dtypes: dict[str, str]


def inspect_artifact(artifact: Path, recipe: Recipe, plan: QuantPlan) -> Inspection:
    """Check the saved weights against the plan; IntegrityError on any mismatch."""
    import mlx.core as mx

    weights: dict[str, Any] = {}
    for shard in sorted(artifact.glob("*.safetensors")):
        loaded: Any = mx.load(str(shard))  # lazy: shapes and dtypes without reading data
        weights.update(loaded)
    problems: list[str] = []
    want = getattr(mx, recipe.dtype)
    quantized_paths = sorted(k[: -len(".scales")] for k in weights if k.endswith(".scales"))
    for path in quantized_paths:
        if path not in plan.quantize:
            problems.append(f"{path} was quantized but the recipe does not quantize it")
    for path, in_dim in plan.quantize.items():
        w, s, b = (weights.get(f"{path}.{n}") for n in ("weight", "scales", "biases"))
        affine = recipe.mode == "affine"
        if w is None or s is None or (affine and b is None):
            problems.append(f"{path} was not quantized (missing weight/scales/biases)")
            continue
        if not affine:  # microscaling: shared uint8 exponents, no biases
            if b is not None:
                problems.append(f"{path} has biases, which {recipe.mode} does not use")
            b = s
        assert b is not None
        assert recipe.bits is not None and recipe.group_size is not None
        packed = in_dim * recipe.bits // 32
        groups = in_dim // recipe.group_size
        if w.dtype != mx.uint32 or int(w.shape[-1]) != packed:
            problems.append(f"{path}.weight is {w.dtype} {tuple(w.shape)}, expected uint32 "
                            f"with last dimension {packed}")
        if tuple(s.shape) != (*w.shape[:-1], groups) or tuple(b.shape) != tuple(s.shape):
            problems.append(f"{path}.scales/.biases shapes {tuple(s.shape)}/{tuple(b.shape)}, "
                            f"expected last dimension {groups}")
        scale_dtype = want if recipe.mode == "affine" else mx.uint8
        if s.dtype != scale_dtype or b.dtype != scale_dtype:
            problems.append(f"{path}.scales/.biases are {s.dtype}/{b.dtype}, not {scale_dtype}")
    quantized_set = set(plan.quantize)
    not_quantized: list[str] = []
    dtypes: dict[str, str] = {}
    for name, array in sorted(weights.items()):
        dtypes[name] = str(array.dtype).removeprefix("mlx.core.")
        module, _, leaf = name.rpartition(".")
        if module in quantized_set and leaf in ("weight", "scales", "biases"):
            continue
        not_quantized.append(name)
        if mx.issubdtype(array.dtype, mx.floating) and array.dtype != want:
            problems.append(f"{name} is {array.dtype}, expected {recipe.dtype}")
    config = json.loads((artifact / "config.json").read_text(encoding="utf-8"))
    if config.get("quantization") != recipe.quantization:
        problems.append(f"config.json quantization is {config.get('quantization')!r}, "
                        f"expected {recipe.quantization!r}")
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more"
                                           if len(problems) > 8 else "")
        raise IntegrityError(f"{artifact}: conversion does not match recipe "
                             f"{recipe.name!r}: {shown}")
    return Inspection(quantized=sorted(f"{p}.weight" for p in plan.quantize),
                      not_quantized=not_quantized, tensor_dtypes=dtypes)


# ---------------------------------------------------------------- driver


@contextlib.contextmanager
def _tempdir(parent: Path, prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def resolve_source(model: str | Path, *, unpinned: bool = False,
                   home: Path | None = None) -> SourceInfo:
    """A lock file -> its verified materialized directory; a directory only if unpinned."""

    return pin.resolve_source(Path(model), unpinned=unpinned, home=home,
                                        source_cls=SourceInfo)


def quantize(
    recipe_path: str | Path,
    model: str | Path,
    out: str | Path,
    *,
    unpinned: bool = False,
    home: Path | None = None,
    progress: Progress = _noop,
) -> QuantizeResult:
    """Run ``recipe_path`` on ``model`` (a lock, or a directory with
    ``unpinned=True``) and write the artifact to ``out`` plus its lock."""
    import time

    recipe = load_recipe(recipe_path)
    out = Path(out).absolute()
    lock_out = _claim_output(out, progress)
    versions = mlx_versions()
    timings: dict[str, float] = {}
    start = time.perf_counter()

    progress(f"source: {model}")
    source = resolve_source(model, unpinned=unpinned, home=home)
    timings["verify_source_s"] = time.perf_counter() - start

    with _tempdir(out.parent, f".{out.name}{STAGING_TAG}{os.getpid()}-") as work:
        staging, converted = work / "source", work / "artifact"
        changes = _stage(source, staging, recipe, progress)
        plan = plan_quantization(staging, recipe)
        progress(f"plan: {len(plan.quantize)} weights to quantize with {recipe.name}")

        t = time.perf_counter()
        progress(f"converting with mlx-lm {versions['mlx-lm']} (mlx {versions['mlx']})")
        try:
            _convert(staging, converted, recipe)
        except OSError as exc:  # mlx-lm's writes name no file: name the artifact
            raise output_error(out, exc) from None
        except RuntimeError as exc:  # mlx's own writer: "[write] Unable to write N bytes"
            raise _mlx_write_error(out, converted, exc) from None
        timings["convert_s"] = time.perf_counter() - t

        progress("inspecting converted weights")
        inspection = inspect_artifact(converted, recipe, plan)
        t = time.perf_counter()
        progress("hashing artifact")
        from guardrepro.artifacts.treehash import tree_hash

        tree = tree_hash(converted)
        timings["hash_s"] = time.perf_counter() - t
        expected = recipe.expected_for(revision=source.revision,
                                       source_tree_sha256=source.tree_sha256)
        result = QuantizeResult(
            artifact=out,
            lock_path=lock_out,
            tree_sha256=tree.sha256,
            files=tree.files,
            bytes=tree.bytes,
            recipe=recipe,
            source=source,
            versions=versions,
            config_changes=changes,
            quantized=inspection.quantized,
            not_quantized=inspection.not_quantized,
            expected=expected,
            seconds=timings,
        )
        # pin first (hashing the files where they are), then publish with one rename
        written = pin.write_artifact_lock(result, files_dir=converted)
        try:
            os.replace(converted, out)
        except OSError:
            for path in written:
                path.unlink(missing_ok=True)
            raise
    timings["total_s"] = time.perf_counter() - start
    return result


def _mlx_write_error(out: Path, staged: Path, exc: RuntimeError) -> Exception:
    """mlx's file writer fails with a RuntimeError that names no file and no errno:
    the artifact ``out`` is named, and a full disk is said to be one when the file
    system of ``staged`` (where the conversion writes) has less room left than the
    write that failed."""
    found = re.search(r"Unable to write (\d+) bytes", str(exc))
    if found is None:
        return exc
    try:
        fs = os.statvfs(staged.parent)
        room = fs.f_bavail * fs.f_frsize
    except OSError:
        room = None
    if room is not None and room < int(found.group(1)):
        return output_error(out, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    return OutputError(f"cannot write {out}: mlx reported {str(exc)!r}")


def _claim_output(out: Path, progress: Progress) -> Path:
    """Refuse an existing ``out`` or sidecar; clear interrupted stagings; the lock path."""
    if out.exists() or out.is_symlink():
        raise InputError("output already exists; choose a new directory", file=str(out))
    lock_out = pin.lock_path_for(out)
    for sidecar in (lock_out, pin.provenance_path_for(out)):
        if sidecar.exists():
            raise InputError("already exists (from an earlier conversion?)", file=str(sidecar))
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_dirs(out.parent, STAGING_TAG):
        progress(f"removed {stale} (left by an interrupted conversion)")
    return lock_out


def _stage(source: SourceInfo, staging: Path, recipe: Recipe,
           progress: Progress) -> list[str]:
    """Hardlink the source into ``staging``, normalise its config.json for
    mlx-lm and check its dtype; returns the config changes."""
    staging.mkdir()
    progress("staging source (hardlinks) and normalising config.json")
    stage_source(source.directory, staging)
    config_path = staging / "config.json"
    if not config_path.is_file():
        raise InputError("source has no config.json", file=str(source.directory))
    config = json.loads(config_path.read_text(encoding="utf-8"))
    normalized, changes = normalize_mlx_config(config, file=str(source.directory /
                                                                 "config.json"))
    if changes:
        _write_json(config_path, normalized)
    _check_source_dtype(staging, recipe)
    return changes


def _check_source_dtype(staging: Path, recipe: Recipe) -> None:
    if recipe.source_dtype is None:
        return
    dtypes = safetensors_dtypes(staging)
    floats = {name: _SAFETENSORS_FLOAT.get(code) for name, code in dtypes.items()
              if code in _SAFETENSORS_FLOAT}
    wrong = sorted(name for name, d in floats.items() if d != recipe.source_dtype)
    if wrong:
        raise InputError(
            f"recipe {recipe.name!r} needs a {recipe.source_dtype} source, but "
            f"{len(wrong)} tensor(s) are not (e.g. {wrong[0]} is {floats[wrong[0]]})",
            field="source_dtype")


def _convert(staging: Path, converted: Path, recipe: Recipe) -> None:
    """mlx-lm's own conversion, with the recipe's parameters and nothing else."""
    from mlx_lm.convert import convert

    # mlx-lm prints its own [INFO] lines: log records (shown with --verbose), so
    # stdout stays guardrepro's report and stderr its warnings
    with capture_stdout("mlx_lm"):
        convert(
            str(staging),
            mlx_path=str(converted),
            quantize=recipe.quantize,
            q_group_size=recipe.group_size,
            q_bits=recipe.bits,
            q_mode=recipe.mode,
            dtype=recipe.dtype,
            trust_remote_code=False,
        )
