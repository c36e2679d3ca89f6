"""``verify``'s per-file fast path (``artifacts/verify_fast.py``) and the fast lock
reader (``artifacts/lock_text.py``) against the general code they replace.

Expectations come from the general path (``check_file`` through ``safe_join``,
``store.write_stamp``, ``tomllib``, ``locks._parse_file``'s per-key checks), run
on the same files: the fast code must give the same statuses, stamps, tables and
entries, and still catch what the stamp is there to catch. Timings are in
docs/SCALE.md (``scripts/bench_scale.py``), not here."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tomllib
from pathlib import Path

import pytest

import guardrepro.artifacts.locks as locks
import guardrepro.artifacts.stamp_pack as stamp_pack
import guardrepro.artifacts.verify_fast as fast
from guardrepro.artifacts.lock_text import fast_table
from guardrepro.artifacts.locks import (
    LocalSource,
    Lock,
    LockedFile,
    directory_lock,
    dump_lock,
    load_lock,
    parse_lock,
)
from guardrepro.artifacts.stamp_pack import VERSION, pack_name, packed_stamp
from guardrepro.artifacts.store import (
    sampled_digest,
    stamp_matches,
    walk_files,
    walk_relpaths,
    write_stamp,
)
from guardrepro.artifacts.verify import check_lock
from guardrepro.errors import LockError, UnsafePathError


def _stamp(home: Path, path: Path) -> Path:
    """Where ``store.write_stamp`` puts the stamp of ``path``."""
    st = os.stat(path)
    return home / "state" / "verified" / f"{st.st_dev}-{st.st_ino}.json"


def _packed(home: Path, path: Path) -> dict[str, object] | None:
    """The stamp ``verify`` left for ``path`` in its packs."""
    return packed_stamp(home / "state" / "verified", os.stat(path))


def _model(root: Path) -> Path:
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "empty").write_bytes(b"")
    (root / "sub" / "b.bin").write_bytes(bytes(range(256)) * 10)
    (root / "sub" / "deep" / "c.txt").write_bytes("ç\n".encode())
    # above the sampled size (512 KiB) and LARGE (1 MiB): the pool, sampled blocks
    (root / "sub" / "big.bin").write_bytes(os.urandom(1536 * 1024 + 7))
    return root


def test_stamps_are_those_of_write_stamp_byte_for_byte(tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    lock = directory_lock(model, "model", tmp_path / "model.toml")
    report = check_lock(lock, tmp_path / "fast", full=True)
    assert report.ok and len(report.files) == 5
    for entry in lock.files:
        path = model / entry.path
        assert entry.sha256 is not None
        write_stamp(tmp_path / "general", path, entry.sha256)
        got = _packed(tmp_path / "fast", path)
        assert got == json.loads(_stamp(tmp_path / "general", path).read_bytes()), entry.path
        assert not _stamp(tmp_path / "fast", path).exists()  # packed, not one file each
        assert stamp_matches(tmp_path / "fast", path, entry.sha256, entry.size)
    big = model / "sub" / "big.bin"
    assert (_packed(tmp_path / "fast", big) or {})["sampled"] == sampled_digest(big)
    small = model / "a.txt"
    assert (_packed(tmp_path / "fast", small) or {})["sampled"] == hashlib.sha256(
        b"alpha\n").hexdigest()


def test_an_edit_of_the_same_size_with_the_mtime_put_back_is_caught(tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    lock = directory_lock(model, "model", tmp_path / "model.toml")
    home = tmp_path / "home"
    assert check_lock(lock, home, full=True).ok
    path = model / "sub" / "b.bin"
    entry = next(e for e in lock.files if e.path == "sub/b.bin")
    before = os.stat(path)
    data = bytearray(path.read_bytes())
    data[1000] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size
    assert not stamp_matches(home, path, entry.sha256 or "", entry.size)  # ctime moved
    stamp_before = _packed(home, path)
    assert stamp_before is not None
    report = check_lock(lock, home, full=True)
    bad = [f for f in report.files if not f.ok]
    assert [(f.path, f.status) for f in bad] == [("sub/b.bin", "mismatch")]
    assert bad[0].observed_sha256 == hashlib.sha256(bytes(data)).hexdigest()
    assert _packed(home, path) == stamp_before  # no stamp for the new bytes


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast.FastChecker, "one", lambda self, entry: None)


def test_every_status_is_the_general_paths(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(tmp_path / "model")
    lock = directory_lock(model, "model", tmp_path / "model.toml")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "c.txt").write_bytes("ç\n".encode())
    (model / "a.txt").write_bytes(b"alphA\n")  # mismatch
    (model / "empty").unlink()  # missing
    (model / "sub" / "b.bin").unlink()
    (model / "sub" / "b.bin").symlink_to(model / "sub" / "big.bin")  # a symlinked file
    os.rename(model / "sub" / "deep", tmp_path / "deep")
    (model / "sub" / "deep").symlink_to(outside)  # a symlinked directory
    extra = LockedFile("sub/other", "0" * 64, 3)
    (model / "sub" / "other").mkdir()  # a directory where a file is pinned
    lock = dataclasses.replace(lock, files=(*lock.files, extra))
    got = check_lock(lock, tmp_path / "home-a", full=True)
    with monkeypatch.context() as patch:
        _general(patch)
        expected = check_lock(lock, tmp_path / "home-b", full=True)
    assert got.files == expected.files
    assert {f.path: f.status for f in got.files} == {
        "a.txt": "mismatch", "empty": "missing", "sub/b.bin": "unsafe",
        "sub/big.bin": "ok", "sub/deep/c.txt": "unsafe", "sub/other": "unsafe",
        str(model): "unsafe"}  # the walk for unlisted files refuses the symlinks too


def test_a_fifo_is_unsafe_and_not_waited_on(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "a").write_bytes(b"a")
    os.mkfifo(model / "pipe")
    lock = Lock("m", "checkpoint", LocalSource(path=str(model)),
                (LockedFile("a", hashlib.sha256(b"a").hexdigest(), 1),
                 LockedFile("pipe", "0" * 64, 0)), path=tmp_path / "m.toml")
    statuses = {f.path: f for f in check_lock(lock, tmp_path / "home", full=True).files}
    assert statuses["a"].ok
    assert statuses["pipe"].status == "unsafe"
    assert statuses["pipe"].detail == f"{model / 'pipe'} is not a regular file"


def test_a_file_that_changes_while_it_is_read_gets_no_stamp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(tmp_path / "model")
    lock = directory_lock(model, "model", tmp_path / "model.toml")
    target = model / "a.txt"
    real = fast.sha256_fd

    def touching(fd: int) -> tuple[str, int]:
        result = real(fd)
        if os.fstat(fd).st_ino == os.stat(target).st_ino:
            os.utime(target, ns=(1, 1))  # moves mtime and ctime after the read
        return result

    monkeypatch.setattr(fast, "sha256_fd", touching)
    report = check_lock(lock, tmp_path / "home", full=True)
    assert report.ok
    assert _packed(tmp_path / "home", target) is None
    assert _packed(tmp_path / "home", model / "empty") is not None


def test_walk_relpaths_is_walk_files_order_and_refuses_symlinks(tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    (model / "a-b").write_bytes(b"dash sorts before slash")
    (model / "a").mkdir()
    (model / "a" / "z").write_bytes(b"")
    expected = sorted(p.relative_to(model).as_posix() for p in model.rglob("*") if p.is_file())
    assert walk_relpaths(model) == expected
    assert [(rel, path) for rel, path in walk_files(model)] == [
        (rel, model / rel) for rel in expected]
    (model / "sub" / "link").symlink_to(model / "a.txt")
    with pytest.raises(UnsafePathError, match="link is a symlink"):
        walk_relpaths(model)


def _dumped(tmp_path: Path, files: tuple[LockedFile, ...], description: str | None = None
            ) -> str:
    lock = Lock("m", "checkpoint", LocalSource(path=str(tmp_path)), files,
                description=description, header="# a header\n", path=tmp_path / "m.toml")
    return dump_lock(lock)


PLAIN = (LockedFile("a/b.bin", "a" * 64, 0), LockedFile("ç é/日本.txt", "b" * 64, 12345678901),
         LockedFile("c", "c" * 64, 7))


@pytest.mark.parametrize("case", ["plain", "quote", "pending", "comment", "crlf",
                                  "inside-string", "trailing-blank", "file-key-above"])
def test_the_fast_lock_table_is_tomllibs_or_none(tmp_path: Path, case: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    text = _dumped(tmp_path, PLAIN)
    if case == "quote":
        text = _dumped(tmp_path, (*PLAIN, LockedFile('q"uote\tx', "d" * 64, 1)))
    elif case == "pending":
        text = _dumped(tmp_path, (*PLAIN, LockedFile("p", pinned_by="first-download")))
    elif case == "comment":
        text = text.replace("size = 7\n", "size = 7 # seven\n")
    elif case == "crlf":
        text = text.replace("\n", "\r\n")
    elif case == "inside-string":
        text = _dumped(tmp_path, PLAIN, description="x\n\n[[file]]\npath = \"n\"\n")
        text = text.replace('description = "x\\n\\n[[file]]\\npath = \\"n\\"\\n"',
                            'description = """\nx\n[[file]]\n"""')
    elif case == "trailing-blank":
        text += "\n"
    elif case == "file-key-above":
        text = text.replace('kind = "checkpoint"\n', 'kind = "checkpoint"\nfile = []\n')
    got = fast_table(text)
    plain = case in ("plain", "trailing-blank")
    if plain:
        assert got == tomllib.loads(text)
    elif case == "inside-string":
        assert got is None or got == tomllib.loads(text)
        assert tomllib.loads(text)["description"] == "x\n[[file]]\n"
    else:
        assert got is None
    path = tmp_path / "lock.toml"
    path.write_text(text, encoding="utf-8", newline="")
    if case == "file-key-above":
        with pytest.raises(Exception, match="file"):
            load_lock(path)
        return
    loaded = load_lock(path)
    with monkeypatch.context() as patch:  # every entry through the general checks
        patch.setattr(locks, "_plain_file", lambda raw, source: None)
        general = parse_lock(tomllib.loads(text), str(path), loaded.header, path.resolve())
    assert loaded == general


@pytest.mark.parametrize(("old", "new", "field", "says"), [
    ('sha256 = "' + "c" * 64 + '"', 'sha256 = "' + "C" * 64 + '"', "file.sha256",
     "64 lowercase hex"),  # outside the fast form: tomllib, then the general checks
    ('path = "c"', 'path = "../c"', "file.path", ".."),  # the fast form, an escaping path
    ("size = 7\n", "size = -7\n", "file.size", ">= 0"),
])
def test_a_bad_entry_is_named_by_file_row_and_field(tmp_path: Path, old: str, new: str,
                                                    field: str, says: str) -> None:
    text = _dumped(tmp_path, PLAIN)
    assert text.count(old) == 1
    path = tmp_path / "lock.toml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(LockError, match=re.escape(says)) as caught:
        load_lock(path)
    assert (caught.value.file, caught.value.row, caught.value.field) == (str(path), 2, field)


def _packs(home: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in (home / "state" / "verified").glob("pack-*")}


def test_packs_merge_runs_and_are_not_rewritten_when_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stamp_pack, "PACKS", 8)  # both runs' stamps share the packs
    one, two = tmp_path / "one", tmp_path / "two"
    for root in (one, two):
        root.mkdir()
        for i in range(40):
            (root / f"f{i}").write_bytes(b"%d %s\n" % (i, root.name.encode()))
    locks = [directory_lock(root, root.name, tmp_path / f"{root.name}.toml")
             for root in (one, two)]
    home = tmp_path / "home"
    assert check_lock(locks[0], home, full=True).ok
    assert check_lock(locks[1], home, full=True).ok
    for lock, root in zip(locks, (one, two), strict=True):  # the second run kept the first's
        for entry in lock.files:
            assert stamp_matches(home, root / entry.path, entry.sha256 or "", entry.size)
    assert 0 < len(_packs(home)) <= 8  # 80 stamps, not one file each
    before = _packs(home)
    assert check_lock(locks[0], home, full=True).ok
    assert _packs(home) == before  # the same stamps: every pack left as it was


def test_a_malformed_or_foreign_pack_line_is_never_trusted(tmp_path: Path) -> None:
    root = tmp_path / "m"
    root.mkdir()
    target = root / "a"
    target.write_bytes(b"alpha\n")
    lock = directory_lock(root, "m", tmp_path / "m.toml")
    home = tmp_path / "home"
    assert check_lock(lock, home, full=True).ok
    st = os.stat(target)
    sha = hashlib.sha256(b"alpha\n").hexdigest()
    assert stamp_matches(home, target, sha, 6)
    pack = home / "state" / "verified" / pack_name(st.st_dev, st.st_ino)
    good = pack.read_text()
    for bad in (good.replace(f"{st.st_ino} 6 ", f"{st.st_ino} 6x "),  # malformed
                good.replace(VERSION, "guardrepro-stamps 0\n"),  # another version
                good.replace(f" {st.st_ctime_ns} ", f" {st.st_ctime_ns + 1} ")):  # other facts
        assert bad != good
        pack.write_text(bad)
        assert not stamp_matches(home, target, sha, 6)
    pack.write_text(good)
    assert stamp_matches(home, target, sha, 6)
