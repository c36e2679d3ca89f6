"""``verify`` of a lock with many files: linear work per file.

200,000 stamps went into one directory and each atomic write listed that
directory to remove dead writers' temp files, so N files cost N^2 (a 20,000-file
lock took 8 minutes on tmpfs); and every stamp, a cache, was fsync'd twice
(4 minutes 47 s for 20,000 files with the cache on disk). Measured figures:
docs/SCALE.md, "A million rows"."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import guardrepro.artifacts.store as store
from guardrepro.artifacts.locks import Lock, directory_lock
from guardrepro.artifacts.verify import check_lock


def _lock(tmp_path: Path, n: int) -> Lock:
    model = tmp_path / "model"
    model.mkdir()
    for i in range(n):
        (model / f"f{i:04d}.txt").write_text(f"file {i}\n")
    return directory_lock(model, "model", tmp_path / "model.toml")


def test_a_directory_is_swept_of_dead_writers_temp_files_once_not_per_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _lock(tmp_path, 60)
    sweeps: list[Path] = []
    real = store.remove_stale

    def counting(parent: Path, *args: object, **kwargs: object) -> list[Path]:
        sweeps.append(parent)
        return real(parent, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "remove_stale", counting)
    report = check_lock(lock, tmp_path / "home", full=True)
    assert report.ok and len(report.files) == 60
    stamps = [p for p in sweeps if p.name == "verified"]
    assert len(stamps) == 1  # 60 stamps written, the stamp directory listed once


def test_a_stale_temp_file_of_a_dead_writer_is_still_removed(tmp_path: Path) -> None:
    dead = 2**22 + 12345  # above the default pid_max: no such process
    litter = tmp_path / f".a.json{store.TMP_TAG}{dead}-abcd"
    litter.write_bytes(b"partial")
    store.atomic_write_bytes(tmp_path / "b.json", b"{}")
    assert not litter.exists() and (tmp_path / "b.json").read_bytes() == b"{}"


def test_stamps_are_not_fsynced_but_results_are(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _lock(tmp_path, 20)
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    report = check_lock(lock, tmp_path / "home", full=True)
    assert report.ok
    assert len(calls) <= 4  # the tree-hash state and its directory, not 2 per stamp
    calls.clear()
    store.atomic_write_bytes(tmp_path / "out.json", b"{}")
    assert len(calls) == 2  # an output: the file and its directory
