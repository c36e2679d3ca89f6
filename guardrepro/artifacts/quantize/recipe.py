"""Quantization recipes: the declarative TOML files under ``quantize/``.

Input: a recipe TOML file. Output: a frozen ``Recipe`` (plus the sha256 of
the file's bytes, recorded in every artifact lock built from it).

Format (keys outside it are an error)::

    [recipe]
    name = "q8-g64"
    description = "..."
    quantize = true          # false: only cast (e.g. bf16.toml)
    bits = 8                 # affine: 1-6 or 8   (omit when quantize = false)
    group_size = 64          # 32, 64 or 128      (omit when quantize = false)
    mode = "affine"          # affine; or mxfp4 / mxfp8 (bits 4 / 8, group 32, no biases)
    dtype = "bfloat16"       # non-quantized tensors and the scales/biases
    source_dtype = "bfloat16"  # every floating source tensor must have it; "any" to skip

    [[expected]]             # published artifacts this recipe should reproduce
    model = "MurrayTom/TS-Guard"
    revision = "<40 hex>"    # matched against the source lock's revision ...
    source_tree_sha256 = ""  # ... or against the source's tree hash (either one)
    tree_sha256 = "<64 hex>"
    files = 9
    bytes = 8103477380
    mlx = "0.32.2"
    mlx_lm = "0.31.3"
    note = "..."

Invariants: bits/group_size/mode are validated against what MLX's quantizer
accepts for the mode (affine: bits 1-6 or 8, group 32/64/128; mxfp4: bits 4,
group 32; mxfp8: bits 8, group 32) before anything is converted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.artifacts.locks import NAME
from guardrepro.artifacts.store import sha256_bytes
from guardrepro.errors import InputError
from guardrepro.serde.fields import JsonValue, opt
from guardrepro.spec import (
    HEX40,
    HEX64,
    check_keys,
    expect_kind,
    is_kind,
    parse_toml,
    type_problem,
)

AFFINE_BITS = (1, 2, 3, 4, 5, 6, 8)
GROUP_SIZES = (32, 64, 128)
DTYPES = ("bfloat16", "float16", "float32")
# mode -> (allowed bits, allowed group sizes); the microscaling formats have fixed shapes
MODES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "affine": (AFFINE_BITS, GROUP_SIZES),
    "mxfp4": ((4,), (32,)),
    "mxfp8": ((8,), (32,)),
}

_RECIPE_KEYS = {"name", "description", "quantize", "bits", "group_size", "mode", "dtype",
                "source_dtype"}
_EXPECTED_KEYS = {"model", "revision", "source_tree_sha256", "tree_sha256", "files", "bytes",
                  "mlx", "mlx_lm", "note"}


@dataclass(frozen=True)
class ExpectedArtifact(JsonValue):
    """A published artifact the recipe should reproduce from one source (a
    value it does not know is left out of its JSON)."""

    model: str
    revision: str | None = opt(omit_none=True)
    source_tree_sha256: str | None = opt(omit_none=True)
    tree_sha256: str = opt()
    files: int | None = opt(omit_none=True)
    bytes: int | None = opt(omit_none=True)
    mlx: str | None = opt(omit_none=True)
    mlx_lm: str | None = opt(omit_none=True)
    note: str = opt()

    def matches(self, *, revision: str | None, source_tree_sha256: str | None) -> bool:
        if self.revision is not None and revision == self.revision:
            return True
        return self.source_tree_sha256 is not None and source_tree_sha256 == self.source_tree_sha256


@dataclass(frozen=True)
class Recipe(JsonValue):
    """A quantization recipe; its JSON (in a sweep's outputs and an artifact's
    provenance) is what it makes, where it was read from, not its prose or its
    expected artifacts."""

    name: str
    description: str = opt(skip=True)
    quantize: bool = opt()
    bits: int | None = opt()
    group_size: int | None = opt()
    mode: str = opt()
    dtype: str = opt()
    source_dtype: str | None = opt()
    expected: tuple[ExpectedArtifact, ...] = opt(skip=True)
    path: str = opt()
    sha256: str = opt()

    @property
    def quantization(self) -> dict[str, Any] | None:
        """What mlx-lm writes to the artifact's ``config.json["quantization"]``."""
        if not self.quantize:
            return None
        return {"group_size": self.group_size, "bits": self.bits, "mode": self.mode}

    def expected_for(
        self, *, revision: str | None, source_tree_sha256: str | None
    ) -> ExpectedArtifact | None:
        for item in self.expected:
            if item.matches(revision=revision, source_tree_sha256=source_tree_sha256):
                return item
        return None


def _get(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], *, file: str,
         where: str, required: bool = True) -> Any:
    if key not in table:
        if required:
            raise InputError("missing key", file=file, field=f"{where}.{key}")
        return None
    value = table[key]
    if not is_kind(value, kind):
        raise InputError(type_problem(value, kind), file=file, field=f"{where}.{key}")
    return value


def _expected(index: int, table: Any, file: str) -> ExpectedArtifact:
    where = f"expected[{index}]"
    if not isinstance(table, Mapping):
        raise InputError("expected a table", file=file, field=where)
    check_keys(table, _EXPECTED_KEYS, file=file, where=where)
    revision = _get(table, "revision", str, file=file, where=where, required=False)
    source_tree = _get(table, "source_tree_sha256", str, file=file, where=where, required=False)
    if revision is not None and not HEX40.match(revision):
        raise InputError("revision must be 40 lowercase hex digits", file=file,
                         field=f"{where}.revision")
    if source_tree is not None and not HEX64.match(source_tree):
        raise InputError("source_tree_sha256 must be 64 lowercase hex digits", file=file,
                         field=f"{where}.source_tree_sha256")
    if revision is None and source_tree is None:
        raise InputError("needs revision or source_tree_sha256", file=file, field=where)
    tree = _get(table, "tree_sha256", str, file=file, where=where)
    if not HEX64.match(tree):
        raise InputError("tree_sha256 must be 64 lowercase hex digits", file=file,
                         field=f"{where}.tree_sha256")
    return ExpectedArtifact(
        model=_get(table, "model", str, file=file, where=where),
        revision=revision,
        source_tree_sha256=source_tree,
        tree_sha256=tree,
        files=_get(table, "files", int, file=file, where=where, required=False),
        bytes=_get(table, "bytes", int, file=file, where=where, required=False),
        mlx=_get(table, "mlx", str, file=file, where=where, required=False),
        mlx_lm=_get(table, "mlx_lm", str, file=file, where=where, required=False),
        note=_get(table, "note", str, file=file, where=where, required=False) or "",
    )


def load_recipe(path: str | Path) -> Recipe:
    """Parse and validate a recipe file; every problem names file and field."""
    path = Path(path)
    file = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read recipe: {exc}", file=file) from exc
    data = parse_toml(raw, file)[0]
    expect_kind(data, "recipe", file=file)
    check_keys(data, ("recipe", "expected"), file=file, required=("recipe",))
    table = data["recipe"]
    if not isinstance(table, Mapping):
        raise InputError(type_problem(table, dict), file=file, field="recipe")
    check_keys(table, _RECIPE_KEYS, file=file, where="recipe")
    w = "recipe"
    name = _get(table, "name", str, file=file, where=w)
    if not NAME.fullmatch(name):  # it names sweep configurations and their folders
        raise InputError(f"name {name!r} must be lowercase [a-z0-9._-], starting alphanumeric",
                         file=file, field="recipe.name")
    quantize = _get(table, "quantize", bool, file=file, where=w)
    mode = _get(table, "mode", str, file=file, where=w, required=False) or "affine"
    dtype = _get(table, "dtype", str, file=file, where=w)
    source_dtype = _get(table, "source_dtype", str, file=file, where=w)
    bits = _get(table, "bits", int, file=file, where=w, required=quantize)
    group_size = _get(table, "group_size", int, file=file, where=w, required=quantize)
    if mode not in MODES:
        raise InputError(f"mode must be one of {sorted(MODES)}, got {mode!r}", file=file,
                         field="recipe.mode")
    if dtype not in DTYPES:
        raise InputError(f"dtype must be one of {DTYPES}, got {dtype!r}", file=file,
                         field="recipe.dtype")
    if source_dtype != "any" and source_dtype not in DTYPES:
        raise InputError(f"source_dtype must be 'any' or one of {DTYPES}", file=file,
                         field="recipe.source_dtype")
    if quantize:
        allowed_bits, allowed_groups = MODES[mode]
        if bits not in allowed_bits:
            raise InputError(f"{mode} bits must be one of {allowed_bits}, got {bits}",
                             file=file, field="recipe.bits")
        if group_size not in allowed_groups:
            raise InputError(f"{mode} group_size must be one of {allowed_groups}, got "
                             f"{group_size}", file=file, field="recipe.group_size")
    elif mode != "affine":
        raise InputError("a mode other than affine needs quantize = true", file=file,
                         field="recipe.mode")
    elif bits is not None or group_size is not None:
        raise InputError("bits/group_size given but quantize = false", file=file,
                         field="recipe.bits" if bits is not None else "recipe.group_size")
    expected_raw = data.get("expected", [])
    if not isinstance(expected_raw, list):
        raise InputError("expected must be an array of tables ([[expected]])", file=file,
                         field="expected")
    return Recipe(
        name=name,
        description=_get(table, "description", str, file=file, where=w, required=False) or "",
        quantize=quantize,
        bits=bits,
        group_size=group_size,
        mode=mode,
        dtype=dtype,
        source_dtype=None if source_dtype == "any" else source_dtype,
        expected=tuple(_expected(i, t, file) for i, t in enumerate(expected_raw)),
        path=file,
        sha256=sha256_bytes(raw),
    )
