"""Lock files: strict parsing (errors name file, entry and field), atomic round trip,
the shipped ToolSafe and TS-Guard locks, and cache path safety."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path

import pytest

from guardrepro.artifacts.locks import (
    GithubSource,
    HfSource,
    LocalSource,
    dump_lock,
    load_lock,
    save_lock,
)
from guardrepro.artifacts.store import guardrepro_home, safe_join
from guardrepro.errors import InputError, LockError, UnsafePathError

ROOT = Path(__file__).resolve().parents[1]
SHA = "a" * 64
COMMIT = "46358fa424a927a895c6c8322f99032c4eb5155e"

GOOD = f"""# header line one
# header line two

name = "demo"
kind = "files"

[source]
type = "github"
repo = "Owner/Repo"
commit = "{COMMIT}"

[[file]]
path = "dir/a.json"
sha256 = "{SHA}"
size = 12
lfs = true

[[file]]
path = "src/p.py"
lfs = false
extract = "template_v2"
extract_sha256 = "{"b" * 64}"
pinned_by = "first-download"
"""


def write(tmp_path: Path, text: str, name: str = "x.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_lock_parses(tmp_path):
    lock = load_lock(write(tmp_path, GOOD))
    assert lock.name == "demo" and lock.kind == "files"
    assert lock.source == GithubSource(repo="Owner/Repo", commit=COMMIT)
    a, p = lock.files
    assert (a.path, a.sha256, a.size, a.lfs, a.pending) == ("dir/a.json", SHA, 12, True, False)
    assert p.pending and p.extract == "template_v2" and p.pinned_by == "first-download"
    assert lock.pending == (p,)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('kind = "files"', 'kind = "files"\ncolour = "red"', "colour"),
        ('commit = "', 'branch = "main"\ncommit = "', "source.branch"),
        ("size = 12", "size = 12\nmode = 1", "file.mode"),
        (f'commit = "{COMMIT}"', 'commit = "main"', "source.commit"),
        (f'commit = "{COMMIT}"', f'commit = "{COMMIT.upper()}"', "source.commit"),
        ("size = 12", "size = true", "file.size"),
        ("size = 12", 'size = "12"', "file.size"),
        ("size = 12", "size = -1", "file.size"),
        (f'sha256 = "{SHA}"', f'sha256 = "{SHA[:-1]}"', "file.sha256"),
        (f'sha256 = "{SHA}"\n', "", "file.sha256"),
        ("lfs = true", "", "file.lfs"),
        ('path = "dir/a.json"', 'path = "../a.json"', "file.path"),
        ('path = "dir/a.json"', 'path = "/etc/passwd"', "file.path"),
        ('path = "dir/a.json"', 'path = "dir//a.json"', "file.path"),
        ('path = "dir/a.json"', 'path = "src/p.py"', "file.path"),
        ('path = "dir/a.json"', 'path = "src/p.py/x"', "file.path"),
        ('type = "github"', 'type = "ftp"', "source.type"),
        ('kind = "files"', 'kind = "model"', "kind"),
        ('name = "demo"', 'name = "Demo Lock"', "name"),
        ('extract_sha256 = "', 'extract_sha = "', "file.extract_sha"),
        ('pinned_by = "first-download"', 'pinned_by = "me"', "file.pinned_by"),
    ],
)
def test_bad_locks_name_file_and_field(tmp_path, old, new, field):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(LockError) as err:
        load_lock(path)
    assert isinstance(err.value, InputError)
    assert str(path) in str(err.value)
    assert err.value.field == field


def test_entry_errors_carry_the_entry_index(tmp_path):
    path = write(tmp_path, GOOD.replace('pinned_by = "first-download"', ""))
    with pytest.raises(LockError) as err:
        load_lock(path)
    assert err.value.row == 1 and err.value.field == "file.sha256"


def test_recorded_pin_needs_its_date_and_a_pending_one_must_not_have_one(tmp_path):
    recorded = GOOD.replace(
        'pinned_by = "first-download"', f'sha256 = "{SHA}"\nsize = 3\npinned_by = "first-download"'
    )
    with pytest.raises(LockError, match="pinned_at"):
        load_lock(write(tmp_path, recorded))
    ok = load_lock(write(tmp_path, recorded + "pinned_at = 2026-01-02\n"))
    assert ok.files[1].pinned_at == dt.date(2026, 1, 2)
    with pytest.raises(LockError, match="pinned_at"):
        load_lock(write(tmp_path, GOOD + "pinned_at = 2026-01-02\n"))


def test_hf_revision_must_be_40_hex(tmp_path):
    text = (
        'name = "m"\nkind = "checkpoint"\n[source]\ntype = "hf"\nrepo = "a/b"\nrevision = "main"\n'
    )
    text += '[[file]]\npath = "config.json"\npinned_by = "first-download"\n'
    with pytest.raises(LockError) as err:
        load_lock(write(tmp_path, text))
    assert err.value.field == "source.revision"


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(LockError, match="invalid TOML"):
        load_lock(write(tmp_path, "name = \n"))
    with pytest.raises(LockError, match="not found"):
        load_lock(tmp_path / "absent.toml")


def test_save_round_trip_keeps_header_and_records_pins(tmp_path):
    path = write(tmp_path, GOOD)
    lock = load_lock(path)
    pinned = lock.with_files(
        (lock.files[0], lock.files[1].recorded("c" * 64, 99, dt.date(2026, 3, 4)))
    )
    save_lock(pinned)
    text = path.read_text()
    assert text.startswith("# header line one\n# header line two\n")
    again = load_lock(path)
    assert again == pinned and not again.pending
    assert again.files[1].pinned_at == dt.date(2026, 3, 4)
    assert text.count("[[file]]") == 2
    assert not list(tmp_path.glob(".*.tmp-*"))  # atomic write left no temp file
    with pytest.raises(LockError):
        again.files[1].recorded("d" * 64, 1, dt.date(2026, 3, 5))  # already pinned


def test_shipped_toolsafe_lock():
    lock = load_lock(ROOT / "locks/toolsafe.toml")
    assert lock.source == GithubSource(repo="MurrayTom/ToolSafe", commit=COMMIT)
    assert len(lock.files) == 22
    bank = lock.file("TS-Bench/agentdojo-traj/banking.json")
    assert bank.sha256 == "eb4a314845c8236ba1bbcd9855973f59279a70368b6eb31d447a4cd243086029"
    assert (bank.size, bank.lfs) == (239239, True)
    meta = lock.file("guardian_test_logs/agentharm/TS-Guard/meta_data.json")
    assert meta.size == 3448028
    prompts = lock.file("src/agent/agent_prompts.py")
    assert prompts.pending and prompts.lfs is False
    assert prompts.extract == "instruction_ashellguardian_template_v2"
    assert (
        prompts.extract_sha256 == "8fd25ddb1c3248d8ffa2e1c3f87947bb245a963bde4fd77df5171a0b29d142a6"
    )
    assert all(f.lfs for f in lock.files if f is not prompts)
    assert load_lock(ROOT / "locks/toolsafe.toml") == lock
    # the shipped file is exactly what save_lock would write (stable diffs after pinning)
    assert dump_lock(lock) == (ROOT / "locks/toolsafe.toml").read_text()


def test_shipped_ts_guard_lock():
    lock = load_lock(ROOT / "locks/ts-guard.toml")
    assert lock.kind == "checkpoint"
    assert lock.source == HfSource(
        repo="MurrayTom/TS-Guard", revision="ad2f82df3ae3e0dcdaed7b7c71e8b7f0b16ead7a"
    )
    names = [f.path for f in lock.files]
    assert "config.json" in names and "model.safetensors.index.json" in names
    assert [n for n in names if n.endswith(".safetensors")] == [
        f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)
    ]
    assert all(f.pending and f.pinned_by == "first-download" for f in lock.files)
    assert "confirmed on the first fetch" in lock.header
    assert dump_lock(lock) == (ROOT / "locks/ts-guard.toml").read_text()


def test_local_source_resolves_relative_to_the_lock(tmp_path):
    text = 'name = "q8"\nkind = "checkpoint"\n[source]\ntype = "local"\npath = "art/q8"\n'
    text += f'tree_sha256 = "{SHA}"\n'
    text += f'[[file]]\npath = "config.json"\nsha256 = "{SHA}"\nsize = 1\n'
    lock = load_lock(write(tmp_path, text))
    assert isinstance(lock.source, LocalSource)
    assert lock.local_dir() == tmp_path.resolve() / "art/q8"


def test_safe_join_refuses_escapes_and_symlinks(tmp_path):
    base = tmp_path / "base"
    (base / "d").mkdir(parents=True)
    assert safe_join(base, "d/new/file") == base / "d/new/file"
    for bad in ["../x", "d/../../x", "/abs", "", "d//x", "./x", "d\\x", "C:/x"]:
        with pytest.raises(UnsafePathError):
            safe_join(base, bad)
    (base / "link").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError, match="symlink"):
        safe_join(base, "link/x")
    with pytest.raises(UnsafePathError, match="symlink"):
        safe_join(base, "link")


def test_home_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "h"))
    assert guardrepro_home() == (tmp_path / "h").resolve()
    assert guardrepro_home(tmp_path / "other") == (tmp_path / "other").resolve()
    monkeypatch.delenv("GUARDREPRO_HOME")
    assert guardrepro_home().name == "guardrepro"
    assert os.path.isabs(guardrepro_home())


def test_save_normalises_header_and_refuses_non_comment_header(tmp_path):
    lock = load_lock(write(tmp_path, GOOD))
    save_lock(dataclasses.replace(lock, header="# one\n# two"), tmp_path / "y.toml")
    assert load_lock(tmp_path / "y.toml").header == "# one\n# two\n"
    with pytest.raises(LockError, match="comments"):
        save_lock(dataclasses.replace(lock, header="# one\nname = 'x'\n"), tmp_path / "z.toml")
    assert not (tmp_path / "z.toml").exists()
