"""Verification stamps are rewritten only when what they say changes.

Re-verifying a lock used to rename a fresh stamp over each existing one; on
ext4 a rename over an existing file flushes the new file's data first (about
7 ms a file here), most of ``verify``'s time on a 20,000-file lock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from guardrepro.artifacts.store import sha256_file, stamp_matches, write_stamp


def _stamp(home: Path, path: Path) -> Path:
    st = os.stat(path)
    return home / "state" / "verified" / f"{st.st_dev}-{st.st_ino}.json"


def test_an_unchanged_stamp_is_not_rewritten_and_a_changed_one_is(tmp_path: Path) -> None:
    home, blob = tmp_path / "home", tmp_path / "blob.bin"
    blob.write_bytes(b"weights" * 100)
    sha, _ = sha256_file(blob)
    write_stamp(home, blob, sha)
    stamp = _stamp(home, blob)
    first = os.stat(stamp).st_ino
    assert json.loads(stamp.read_text())["sha256"] == sha
    write_stamp(home, blob, sha)  # the same facts: the same file, not a new one
    assert os.stat(stamp).st_ino == first
    assert stamp_matches(home, blob, sha, blob.stat().st_size)
    blob.write_bytes(b"other" * 100)  # same inode, new size and times: a new stamp
    sha2, _ = sha256_file(blob)
    write_stamp(home, blob, sha2)
    assert os.stat(stamp).st_ino != first
    assert json.loads(stamp.read_text())["sha256"] == sha2
    assert stamp_matches(home, blob, sha2, blob.stat().st_size)
    assert not stamp_matches(home, blob, sha, blob.stat().st_size)
