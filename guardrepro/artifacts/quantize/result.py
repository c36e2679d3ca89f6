"""What a quantization produced: its source and its artifact (frozen values).

Input: filled by ``quantize.convert.quantize``. Output: read by
``quantize.pin`` (the artifact lock and provenance file) and the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrepro.artifacts.quantize.recipe import ExpectedArtifact, Recipe


@dataclass(frozen=True)
class SourceInfo:
    directory: Path
    pinned: bool
    lock_path: str | None
    lock_sha256: str | None
    repo: str | None
    revision: str | None
    tree_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "pinned": self.pinned,
            "lock": self.lock_path,
            "lock_sha256": self.lock_sha256,
            "repo": self.repo,
            "revision": self.revision,
            "tree_sha256": self.tree_sha256,
            **({} if self.pinned else {"directory": str(self.directory)}),
        }


@dataclass(frozen=True)
class QuantizeResult:
    artifact: Path
    lock_path: Path
    tree_sha256: str
    files: int
    bytes: int
    recipe: Recipe
    source: SourceInfo
    versions: dict[str, str]
    config_changes: list[str]
    quantized: list[str]
    not_quantized: list[str]
    expected: ExpectedArtifact | None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def expected_match(self) -> bool | None:
        return None if self.expected is None else self.expected.tree_sha256 == self.tree_sha256
