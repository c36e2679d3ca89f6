"""Tree hash against an independent computation; verify/materialize of package and
local locks; tampering, extra files, symlinks; the fetch and verify CLIs."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from loopback import sha

import guardrepro
from guardrepro.artifacts.fetch import fetch_lock, materialize
from guardrepro.artifacts.treehash import tree_hash
from guardrepro.artifacts.verify import verify_lock
from guardrepro.cli import cli, main
from guardrepro.errors import IntegrityError, MissingArtifactError, UnsafePathError

PKG = Path(guardrepro.__file__).resolve().parent
PKG_FILES = ["errors.py", "cli/__init__.py"]


def independent_tree_hash(root: Path) -> tuple[str, int, int]:
    """Re-implementation from the spec text, sharing no code with guardrepro."""
    items = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            items.append((os.path.relpath(full, root).replace(os.sep, "/"), full))
    items.sort()
    h = hashlib.sha256()
    total = 0
    for rel, full in items:
        data = Path(full).read_bytes()
        name = rel.encode("utf-8")
        h.update(struct.pack(">Q", len(name)) + name + struct.pack(">Q", len(data)) + data)
        total += len(data)
    return h.hexdigest(), len(items), total


def make_tree(root: Path) -> None:
    (root / "sub/deeper").mkdir(parents=True)
    (root / "config.json").write_bytes(b'{"bits": 8}')
    (root / "model.safetensors").write_bytes(bytes(range(256)) * 300)
    (root / "sub/deeper/é.txt").write_bytes("héllo".encode())
    (root / "sub/empty").write_bytes(b"")
    (root / "a-b").write_bytes(b"dash sorts before slash")


def test_tree_hash_matches_hand_computation_for_one_file(tmp_path):
    (tmp_path / "a").write_bytes(b"x")
    expected = hashlib.sha256(
        b"\x00" * 7 + b"\x01" + b"a" + b"\x00" * 7 + b"\x01" + b"x"
    ).hexdigest()
    got = tree_hash(tmp_path)
    assert (got.sha256, got.files, got.bytes) == (expected, 1, 1)
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    assert tree_hash(empty).sha256 == hashlib.sha256(b"").hexdigest()


def test_tree_hash_matches_independent_computation(tmp_path):
    make_tree(tmp_path)
    got = tree_hash(tmp_path)
    assert (got.sha256, got.files, got.bytes) == independent_tree_hash(tmp_path)
    (tmp_path / "sub/empty").write_bytes(b"!")
    assert tree_hash(tmp_path).sha256 != got.sha256


def test_tree_hash_refuses_symlinks(tmp_path):
    make_tree(tmp_path / "t")
    (tmp_path / "t/link").symlink_to(tmp_path / "t/config.json")
    with pytest.raises(UnsafePathError, match="symlink"):
        tree_hash(tmp_path / "t")
    os.unlink(tmp_path / "t/link")
    (tmp_path / "t/dirlink").symlink_to(tmp_path / "t/sub", target_is_directory=True)
    with pytest.raises(UnsafePathError, match="symlink"):
        tree_hash(tmp_path / "t")


def package_lock(tmp_path: Path) -> Path:
    body = '# lock over files of the guardrepro package\nname = "pkg"\nkind = "files"\n'
    body += '\n[source]\ntype = "package"\n'
    for rel in PKG_FILES:
        data = (PKG / rel).read_bytes()
        body += f'\n[[file]]\npath = "{rel}"\nsha256 = "{sha(data)}"\nsize = {len(data)}\n'
    path = tmp_path / "pkg.toml"
    path.write_text(body)
    return path


def test_package_lock_fetch_verify_tamper_repair(tmp_path):
    lock, home = package_lock(tmp_path), tmp_path / "home"
    with pytest.raises(MissingArtifactError, match="guardrepro fetch"):
        materialize(lock, home)
    report = fetch_lock(lock, home, progress=False)
    assert [f.action for f in report.files] == ["copied", "copied"]
    for rel in PKG_FILES:
        assert (report.directory / rel).read_bytes() == (PKG / rel).read_bytes()
    assert verify_lock(lock, home).ok
    assert materialize(lock, home) == report.directory

    # flip one byte of the cached errors.py (hardlinked: blob and directory alike)
    target = report.directory / "errors.py"
    good = target.read_bytes()
    os.chmod(target, 0o644)
    bad = bytes([good[0] ^ 1]) + good[1:]
    target.write_bytes(bad)
    result = verify_lock(lock, home)
    assert not result.ok
    (problem,) = result.problems
    assert (problem.path, problem.status) == ("errors.py", "mismatch")
    assert (problem.expected_sha256, problem.observed_sha256) == (sha(good), sha(bad))
    with pytest.raises(IntegrityError) as err:
        result.raise_for_status()
    assert (
        "errors.py" in str(err.value) and sha(good) in str(err.value) and sha(bad) in str(err.value)
    )

    # fetch repairs the cache from the package (the corrupt blob is replaced)
    fixed = fetch_lock(lock, home, progress=False)
    assert [f.action for f in fixed.files] == ["repaired", "cached"]
    assert verify_lock(lock, home).ok
    assert (fixed.directory / "errors.py").read_bytes() == good


def test_materialize_rebuilds_from_blobs_and_refuses_extras_and_symlinks(tmp_path):
    lock, home = package_lock(tmp_path), tmp_path / "home"
    directory = fetch_lock(lock, home, progress=False).directory
    shutil.rmtree(directory)
    assert materialize(lock, home) == directory  # no network: relinked from blobs
    assert (directory / "cli/__init__.py").exists()

    (directory / "cli/link").symlink_to(directory / "errors.py")
    report = verify_lock(lock, home)
    assert [p.status for p in report.problems] == ["unsafe"]
    os.unlink(directory / "cli/link")

    (directory / "stray.txt").write_text("not pinned")
    report = verify_lock(lock, home)
    assert [(p.path, p.status) for p in report.problems] == [("stray.txt", "unexpected")]
    assert materialize(lock, home) == directory  # rebuilt without the stray file
    assert not (directory / "stray.txt").exists()


def local_lock(tmp_path: Path, art: Path, tree: str | None = None) -> Path:
    body = 'name = "q8"\nkind = "checkpoint"\n\n[source]\ntype = "local"\npath = "art"\n'
    got = independent_tree_hash(art)
    body += f'tree_sha256 = "{tree or got[0]}"\ntree_files = {got[1]}\ntree_bytes = {got[2]}\n'
    for rel, full in sorted(
        (p.relative_to(art).as_posix(), p) for p in art.rglob("*") if p.is_file()
    ):
        data = full.read_bytes()
        body += f'\n[[file]]\npath = "{rel}"\nsha256 = "{sha(data)}"\nsize = {len(data)}\n'
    path = tmp_path / "q8.toml"
    path.write_text(body)
    return path


def test_local_lock_verified_in_place(tmp_path):
    art = tmp_path / "art"
    make_tree(art)
    lock = local_lock(tmp_path, art)
    report = fetch_lock(lock, tmp_path / "home", progress=False)
    assert report.directory == art.resolve()
    assert {f.action for f in report.files} == {"in-place"}
    assert materialize(lock, tmp_path / "home") == art.resolve()
    result = verify_lock(lock, tmp_path / "home")
    assert result.ok and result.tree is not None
    assert result.tree.observed is not None
    assert result.tree.observed.sha256 == independent_tree_hash(art)[0]

    weights = (art / "model.safetensors").read_bytes()
    (art / "model.safetensors").write_bytes(
        weights[:100] + bytes([weights[100] ^ 1]) + weights[101:]
    )
    result = verify_lock(lock, tmp_path / "home")
    assert [(p.path, p.status) for p in result.problems] == [("model.safetensors", "mismatch")]
    assert not result.tree.ok
    with pytest.raises(IntegrityError, match=r"model\.safetensors"):
        materialize(lock, tmp_path / "home")


def test_local_lock_with_wrong_tree_hash_fails(tmp_path):
    art = tmp_path / "art"
    make_tree(art)
    lock = local_lock(tmp_path, art, tree="0" * 64)
    result = verify_lock(lock, tmp_path / "home")
    assert all(f.ok for f in result.files) and not result.ok
    with pytest.raises(IntegrityError, match="tree"):
        result.raise_for_status()


def test_local_lock_refuses_symlink(tmp_path):
    art = tmp_path / "art"
    make_tree(art)
    lock = local_lock(tmp_path, art)
    (art / "extra-link").symlink_to(art / "config.json")
    result = verify_lock(lock, tmp_path / "home")
    assert not result.ok and "unsafe" in [p.status for p in result.problems]
    with pytest.raises(UnsafePathError, match="extra-link"):
        fetch_lock(lock, tmp_path / "home", progress=False)


def test_cli_fetch_and_verify(tmp_path):
    lock, home = package_lock(tmp_path), tmp_path / "home"
    runner = CliRunner()
    out = runner.invoke(cli, ["fetch", str(lock), "--home", str(home), "--no-progress"])
    assert out.exit_code == 0, out.output
    assert "copied" in out.output and "errors.py" in out.output
    directory = out.output.strip().splitlines()[-1].removeprefix("directory: ")
    assert (Path(directory) / "errors.py").exists()
    out = runner.invoke(cli, ["verify", str(lock), "--home", str(home)])
    assert out.exit_code == 0 and out.output.count("ok ") >= 2
    for verb in ("fetch", "verify"):
        assert "LOCK" in runner.invoke(cli, [verb, "--help"]).output


def test_cli_verify_exit_code_names_tampered_file(tmp_path, capsys):
    lock, home = package_lock(tmp_path), tmp_path / "home"
    directory = fetch_lock(lock, home, progress=False).directory
    target = directory / "cli/__init__.py"
    good = target.read_bytes()
    os.chmod(target, 0o644)
    target.write_bytes(good + b"\n")
    assert main(["verify", str(lock), "--home", str(home)]) == 2
    captured = capsys.readouterr()
    assert "mismatch" in captured.out and "cli/__init__.py" in captured.out
    assert sha(good) in captured.err and sha(good + b"\n") in captured.err


def test_cli_verify_unfetched_hf_lock_is_missing(tmp_path, capsys):
    root = Path(__file__).resolve().parents[1]
    lock = root / "locks/ts-guard.toml"
    assert main(["verify", str(lock), "--home", str(tmp_path / "home")]) == 2
    captured = capsys.readouterr()
    assert "unpinned" in captured.out and "config.json" in captured.out
    assert "guardrepro fetch" in captured.err


def test_symlinked_blob_is_refused(tmp_path):
    lock, home = package_lock(tmp_path), tmp_path / "home"
    directory = fetch_lock(lock, home, progress=False).directory
    data = (PKG / "errors.py").read_bytes()
    blob = home / "blobs/sha256" / sha(data)
    shutil.rmtree(directory)
    blob.unlink()
    blob.symlink_to(PKG / "errors.py")  # right bytes, but through a link
    with pytest.raises(UnsafePathError, match="symlink"):
        materialize(lock, home)
    with pytest.raises(UnsafePathError, match="symlink"):
        fetch_lock(lock, home, progress=False)
    report = verify_lock(lock, home)
    assert ("errors.py", "missing") in [(p.path, p.status) for p in report.problems]
    fetch_lock(package_lock(tmp_path), tmp_path / "other-home", progress=False)
    other = tmp_path / "other-home"
    (other / "blobs/sha256" / sha(data)).unlink()
    (other / "blobs/sha256" / sha(data)).symlink_to(PKG / "errors.py")
    report = verify_lock(lock, other)  # directory intact (hardlink), blob replaced by a link
    assert [(p.path, p.status) for p in report.problems] == [("errors.py", "unsafe")]


def test_cached_tree_hash_reads_once_until_a_stamp_changes(tmp_path, monkeypatch):
    import guardrepro.artifacts.treehash as treehash_mod

    root, home = tmp_path / "tree", tmp_path / "home"
    root.mkdir()
    make_tree(root)
    calls = []
    real = treehash_mod.tree_hash

    def counting(directory):
        calls.append(Path(directory))
        return real(directory)

    monkeypatch.setattr(treehash_mod, "tree_hash", counting)
    first = treehash_mod.cached_tree_hash(root, home)
    assert (first.sha256, first.files, first.bytes) == independent_tree_hash(root)
    assert len(calls) == 1
    assert treehash_mod.cached_tree_hash(root, home) == first
    assert len(calls) == 1  # second call: stamps only, no byte read
    assert list((home / "state/trees").iterdir())

    # one byte changed, same size: new mtime -> recomputed
    weights = root / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[7] ^= 0xFF
    weights.write_bytes(bytes(data))
    changed = treehash_mod.cached_tree_hash(root, home)
    assert len(calls) == 2 and changed.sha256 != first.sha256
    assert changed.sha256 == independent_tree_hash(root)[0]

    # changed back with the old mtime restored: ctime still differs -> recomputed
    st = os.stat(weights)
    data[7] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert treehash_mod.cached_tree_hash(root, home).sha256 == first.sha256
    assert len(calls) == 3

    # a new file -> recomputed
    (root / "extra").write_bytes(b"x")
    assert treehash_mod.cached_tree_hash(root, home).files == first.files + 1
    assert len(calls) == 4
    # another home has its own record
    treehash_mod.cached_tree_hash(root, tmp_path / "home2")
    assert len(calls) == 5
