"""``quantize.safetensors_dtypes`` reads dtypes through the safetensors library.

Files are written with ``safetensors.numpy.save_file`` (the library's own
writer) and, for the bad cases, by hand; no mlx needed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from guardrepro.artifacts.quantize.convert import safetensors_dtypes
from guardrepro.errors import InputError

numpy_st = pytest.importorskip("safetensors.numpy", reason="safetensors is not installed")


def test_dtypes_of_every_shard(tmp_path: Path) -> None:
    numpy_st.save_file({"a.weight": np.zeros((2, 3), np.float32),
                        "a.bias": np.zeros(3, np.float16)}, str(tmp_path / "m-1.safetensors"))
    numpy_st.save_file({"b.weight": np.zeros(4, np.uint32)}, str(tmp_path / "m-2.safetensors"),
                       metadata={"format": "np"})
    assert safetensors_dtypes(tmp_path) == {"a.weight": "F32", "a.bias": "F16",
                                            "b.weight": "U32"}


def test_shipped_toy_guard_is_bfloat16() -> None:
    root = Path(__file__).resolve().parent.parent / "guardrepro" / "data" / "toy_guard"
    dtypes = safetensors_dtypes(root)
    assert dtypes and set(dtypes.values()) == {"BF16"}


@pytest.mark.parametrize("content", [b"\x01\x02", b"\x10\x00\x00\x00\x00\x00\x00\x00{not json"])
def test_bad_file_names_the_file(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "bad.safetensors").write_bytes(content)
    with pytest.raises(InputError, match=r"bad\.safetensors"):
        safetensors_dtypes(tmp_path)


def test_no_weights(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no \*\.safetensors"):
        safetensors_dtypes(tmp_path)
