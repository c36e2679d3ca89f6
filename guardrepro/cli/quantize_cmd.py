"""``guardrepro quantize --recipe R --model LOCK_OR_DIR --out DIR [--unpinned]``.

Input: a recipe TOML (``quantize/*.toml``), a source checkpoint lock (or a
plain directory with ``--unpinned``), a new output directory. Output: the MLX
artifact in ``DIR``, its lock ``DIR.lock.toml`` and provenance
``DIR.quantize.json``; stdout names them, the tree hash, file count and size,
the quantized-weight count, and whether the recipe's published tree hash
matched (a mismatch is reported, exit code 0; refusing recipes and integrity
failures exit non-zero through ``guardrepro.errors``).
"""

from __future__ import annotations

from pathlib import Path

import click

from guardrepro.artifacts.quantize.convert import quantize as run_quantize
from guardrepro.cli.options import PROGRESS_OPTION, SpecFile, echo, home_option


@click.command(short_help="Convert a verified checkpoint to a pinned MLX artifact.")
@click.option("--recipe", "recipe", required=True, type=SpecFile("quantize", exists=True),
              help="Quantization recipe TOML (quantize/q8-g64.toml, bf16.toml, ...).")
@click.option("--model", "model", required=True, type=click.Path(exists=True, path_type=Path),
              help="Source checkpoint: a lock file (verified), or a directory with --unpinned.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="New output directory for the MLX artifact (must not exist).")
@click.option("--unpinned", is_flag=True, default=False,
              help="Accept a plain directory as the source (recorded as unpinned).")
@home_option
@PROGRESS_OPTION
def quantize(recipe: Path, model: Path, out: Path, unpinned: bool, home: Path | None,
             progress: bool) -> None:
    """Convert a verified checkpoint to an MLX artifact with mlx-lm and pin it."""

    def step(message: str) -> None:
        if progress:
            echo(f"[quantize] {message}", err=True)

    result = run_quantize(recipe, model, out, unpinned=unpinned, home=home, progress=step)
    size_mb = result.bytes / 1e6
    echo(f"artifact   {result.artifact}")
    echo(f"lock       {result.lock_path}")
    echo(f"recipe     {result.recipe.name} (sha256 {result.recipe.sha256[:12]}...)")
    echo(f"versions   mlx {result.versions['mlx']}, mlx-lm {result.versions['mlx-lm']}")
    src = result.source
    echo("source     " + (f"{src.repo}@{src.revision}" if src.revision else
                          f"{src.repo or src.directory} tree {src.tree_sha256}")
         + ("" if src.pinned else "  [UNPINNED]"))
    for change in result.config_changes:
        echo(f"config     normalised {change}")
    echo(f"quantized  {len(result.quantized)} weights; {len(result.not_quantized)} "
         "other tensors")
    echo(f"tree hash  {result.tree_sha256}  ({result.files} files, {result.bytes} bytes, "
         f"{size_mb:.1f} MB)")
    expected = result.expected
    if expected is None:
        echo("expected   no published tree hash for this source in the recipe")
    else:
        verdict = "MATCH" if result.expected_match else "MISMATCH"
        echo(f"expected   {expected.tree_sha256}  ({expected.model}, mlx {expected.mlx}, "
             f"mlx-lm {expected.mlx_lm})")
        echo(f"           {verdict}")
        if not result.expected_match:
            echo("           (information, not a failure: a different mlx / mlx-lm "
                 "version or source changes the bytes)")
    timings = ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items())
    echo(f"timings    {timings}")
