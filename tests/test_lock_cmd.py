"""``guardrepro lock``: a local checkpoint directory, and a Hub repo listed through
huggingface_hub against a loopback Hub (tree listing + resolve), then fetched."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from loopback import HubFile, HubRepo, HubServer, _send

from guardrepro.artifacts.locks import LocalSource, load_lock
from guardrepro.cli import cli, main
from scripts.toy.tiny import build_tiny_qwen2

REVISION = "0123456789abcdef0123456789abcdef01234567"


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and stdout+stderr of the console entry point."""
    code = main([*args])
    out = capsys.readouterr()
    return code, out.out + out.err


class ListingHub(HubServer):
    """HubServer plus ``GET /api/models/{repo}/tree/{revision}`` (recursive listing)."""

    def resolve(self, h, path):  # type: ignore[no-untyped-def]
        prefix = f"/api/models/{self.repo.repo}/tree/{self.repo.commit}"
        if path.rstrip("/") == prefix:
            items = [{"type": "file", "path": name, "size": len(f.data),
                      "oid": hashlib.sha1(f.data).hexdigest()}
                     for name, f in sorted(self.repo.files.items())]
            items.append({"type": "directory", "path": "sub", "oid": "0" * 40, "size": 0})
            body = json.dumps(items).encode()
            return lambda hh: _send(hh, 200, {"Content-Type": "application/json",
                                              "Content-Length": str(len(body))}, body)
        return super().resolve(h, path)


def test_lock_local_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = build_tiny_qwen2(tmp_path / "tiny")
    out = tmp_path / "locks" / "mine.toml"
    result = CliRunner().invoke(cli, ["lock", str(tiny), "--out", str(out), "--guard",
                                      "toy-guard"])
    assert result.exit_code == 0, result.output
    lock = load_lock(out)
    assert lock.name == "mine" and lock.kind == "checkpoint"
    assert isinstance(lock.source, LocalSource) and lock.local_dir().resolve() == tiny.resolve()
    moved = tmp_path / "elsewhere" / "deeper" / "mine.toml"  # the lock survives a move
    moved.parent.mkdir(parents=True)
    moved.write_bytes(out.read_bytes())
    assert load_lock(moved).local_dir().resolve() == tiny.resolve()
    expected = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                for p in tiny.iterdir() if p.is_file()}
    assert {f.path: f.sha256 for f in lock.files} == expected
    header = out.read_text()
    assert "#   eos 0 <|endoftext|>, 2 <|im_end|> (generation_config.json)" in header
    assert "#   pad 0 <|endoftext|>" in header
    # an existing lock is not overwritten without --force
    code, text = run_main(["lock", str(tiny), "--out", str(out)], capsys)
    assert code == 2 and "exists" in text
    # a guard whose tokens the checkpoint does not declare is refused before writing
    other = tmp_path / "locks" / "lg.toml"
    code, text = run_main(["lock", str(tiny), "--out", str(other), "--guard", "llama-guard-3"],
                          capsys)
    assert code == 2 and "<|eot_id|>" in text and not other.exists()


def test_lock_refuses_symlinks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "ck"
    d.mkdir()
    (d / "a.json").write_text("{}")
    (d / "b.json").symlink_to(d / "a.json")
    code, text = run_main(["lock", str(d), "--out", str(tmp_path / "x.toml")], capsys)
    assert code == 2 and "symbolic" in text


SCRIPT = """
import sys
from guardrepro.cli import main
main(sys.argv[1:])
"""


def _env(server: HubServer, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=server.url, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_OFFLINE="0",
               HF_HUB_DISABLE_TELEMETRY="1", GUARDREPRO_HOME=str(tmp_path / "home"),
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return env


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_hub_lock_lists_then_pins_at_first_download(tmp_path: Path) -> None:
    files = {"config.json": HubFile(b'{"model_type": "llama"}\n', lfs=False),
             "model.safetensors": HubFile(bytes(range(256)) * 40, lfs=True)}
    repo = HubRepo("Org/Guard-1B", REVISION, files)
    out = tmp_path / "guard.toml"
    with ListingHub(repo) as server:
        env = _env(server, tmp_path)
        proc = _cli(["lock", "--hub", "Org/Guard-1B", "--revision", REVISION, "--out",
                     str(out)], env)
        assert proc.returncode == 0, proc.stderr
        assert "2 files (pending first download)" in proc.stdout
        lock = load_lock(out)
        assert [f.path for f in lock.files] == ["config.json", "model.safetensors"]
        assert all(f.pending and f.pinned_by == "first-download" for f in lock.files)
        before = out.read_text()
        committed = tmp_path / "guard.pinned.toml"
        fetched = _cli(["fetch", str(out), "--out", str(committed)], env)
        assert fetched.returncode == 0, fetched.stderr
    assert out.read_text() == before  # pins go to --out, never into LOCK
    pinned = {f.path: f.sha256 for f in load_lock(committed).files}
    assert pinned == {name: hashlib.sha256(f.data).hexdigest() for name, f in files.items()}


def test_hub_lock_needs_a_full_revision(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, text = run_main(["lock", "--hub", "Org/X", "--revision", "main", "--out",
                           str(tmp_path / "x.toml")], capsys)
    assert code == 2 and "40-hex" in text


@pytest.mark.parametrize("args", [[], ["DIR", "--hub", "Org/X"]])
def test_exactly_one_source(tmp_path: Path, args: list[str],
                            capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(tmp_path) if a == "DIR" else a for a in args]
    code, text = run_main(["lock", *args, "--out", str(tmp_path / "x.toml")], capsys)
    assert code == 2 and "exactly one" in text
