"""mlx-lm issue #1906 (batch generation ignores the padding mask on mlx 0.32.2 /
mlx-lm 0.31.3, the versions the paper pins): the MLX runner's batched decoding
relies on mlx-lm's masked ``BatchKVCache``, so on those versions it runs at
batch 1 from load time, with the reason in its provenance. No MLX needed: the
rule reads the version string."""

from __future__ import annotations

import pytest

from guardrepro.run.runners.mlx_batch import version_reason


@pytest.mark.parametrize("version", ["0.31.3", "0.31.2", "0.30.0", "0.31.3rc1"])
def test_pinned_and_older_mlx_lm_batch_at_1(version: str) -> None:
    reason = version_reason(version)
    assert reason is not None
    assert f"mlx-lm {version}" in reason and "#1906" in reason and "padding mask" in reason


@pytest.mark.parametrize("version", ["0.31.4", "0.32.2", "1.0", None])
def test_later_mlx_lm_may_batch(version: str | None) -> None:
    assert version_reason(version) is None
