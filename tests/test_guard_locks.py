"""The baseline guards' locks: pinned values against the published ones (transcribed
by hand from the upstream facts page), what ``verify`` says on an empty cache, and
fetch of such a lock from a loopback Hub (first-download pins recorded, published
hashes enforced)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest
from loopback import HubFile, HubRepo, HubServer, sha
from test_fetch_hub import run_fetch

from guardrepro.artifacts.locks import HfSource, LockedFile, load_lock, parse_lock
from guardrepro.artifacts.pins import with_cached_pins
from guardrepro.cli import main
from guardrepro.errors import LockError

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "locks"

# (lock, repo, revision), each revision as printed in "Pins of the other model guards"
REVISIONS = [
    ("llama-guard-3-1b", "meta-llama/Llama-Guard-3-1B", "acf7aafa60f0410f8f42b1fa35e077d705892029"),
    ("llama-guard-3-8b", "meta-llama/Llama-Guard-3-8B", "7327bd9f6efbbe6101dc6cc4736302b3cbb6e425"),
    ("qwen3guard-gen-0.6b", "Qwen/Qwen3Guard-Gen-0.6B", "fada3b2f655b89601929198343c94cd2f64d93cc"),
    ("qwen3guard-gen-4b", "Qwen/Qwen3Guard-Gen-4B", "6ec42827da0c1ff11e7a49dc269d2e810d27e108"),
    ("qwen3guard-gen-8b", "Qwen/Qwen3Guard-Gen-8B", "4505cb1a6f1864f21f8b27f7daf1b9a1aab6edbb"),
    ("shieldgemma-2b", "google/shieldgemma-2b", "d1dffc9c8c9237a90aab09c61383791e718ef9e8"),
    ("ts-guard", "MurrayTom/TS-Guard", "ad2f82df3ae3e0dcdaed7b7c71e8b7f0b16ead7a"),
]

# every published (sha256, bytes) pair; None where the page gives no value
PUBLISHED: dict[str, dict[str, tuple[str | None, int | None]]] = {
    "llama-guard-3-1b": {"model.safetensors": (None, 2_996_982_344)},
    "llama-guard-3-8b": {
        "tokenizer.json": ("bbc1904d35169c542dffbe1f7589a5994ec7426d9e5b609d07bab876f32e97ab",
                           9_084_449)},
    "qwen3guard-gen-0.6b": {
        "config.json": ("4674816bdf440c113a9ca87aedfa069b67f7cabbd89e71da7d4e4a68adce4af4", None),
        "generation_config.json": (
            "5f0bc42aae9f779d06bf620ce685a02cb0cde802d0f27f05c7331aaf0e1fd2d7", None),
        "merges.txt": ("8831e4f1a044471340f7c0a83d7bd71306a5b867e95fd870f74d0c5308a904d5", None),
        "model.safetensors": (
            "4f3ce47ebd968cddb67de08d8764f8ede7c410a7d1fb9e08145a4c7a2f2e5c0f", None),
        "tokenizer.json": ("aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
                           11_422_654),
        "tokenizer_config.json": (
            "934e187433b06c5d28519e0347dd293084cf28621f00a86ae7e24e42f8b53e81", None),
        "vocab.json": ("ca10d7e9fb3ed18575dd1e277a2579c16d108e32f27439684afa0e10b1440910", None),
        "LICENSE": ("832dd9e00a68dd83b3c3fb9f5588dad7dcf337a0db50f7d9483f310cd292e92e", None),
    },
    "qwen3guard-gen-4b": {},
    "qwen3guard-gen-8b": {},
    "shieldgemma-2b": {
        "config.json": ("a6ed3351158dadd870db10fa19ec69b897001f37c1339881165bfbd267875b42", 842),
        "model-00001-of-00002.safetensors": (
            "343f39c3f075eda5077dab58476d3e3231432ea3cddeb81e6f5ad106b0b524f5", 4_988_025_760),
        "model-00002-of-00002.safetensors": (
            "ce68ef43056ff896f0fa55bada30885eb192a1a439cc984d44d836329c752f21", 240_691_728),
        "model.safetensors.index.json": (
            "974f980f459399b2fda03e556f9917f5d03228f4c07dfbe7a6b146be02d4e91c", 24_223),
        "special_tokens_map.json": (
            "db82f8bd9b25d14f9c788e6bde64de84d42f1c2538f1c245ba6cb3e872d14b18", 555),
        "tokenizer.json": ("3f289bc05132635a8bc7aca7aa21255efd5e18f3710f43e3cdb96bcd41be4922",
                           17_525_357),
        "tokenizer.model": ("61a7b147390c64585d6c3543dd6fc636906c9af3865a5548f27f31aee1d4c8e2",
                            4_241_003),
        "tokenizer_config.json": (
            "20dc327cc0ddb4bad2ebc5042f561f89fc980855a87db593ed80ac07ca5efcba", 47_904),
    },
    "ts-guard": {},
}


@pytest.mark.parametrize(("name", "repo", "revision"), REVISIONS)
def test_lock_is_at_the_published_revision_with_the_published_hashes(
        name: str, repo: str, revision: str) -> None:
    lock = load_lock(LOCKS / f"{name}.toml")
    assert lock.name == name and lock.kind == "checkpoint"
    assert lock.source == HfSource(repo=repo, revision=revision)
    published = PUBLISHED[name]
    assert set(published) <= {entry.path for entry in lock.files}
    for entry in lock.files:
        want_sha, want_size = published.get(entry.path, (None, None))
        assert (entry.sha256, entry.size) == (want_sha, want_size), entry.path
        assert entry.pinned_at is None  # nothing recorded: never downloaded here
        # every value the page does not give is left to the first download
        assert (entry.pinned_by == "first-download") == (want_sha is None or want_size is None)
    assert "Not yet downloaded here" in lock.header


def test_no_lock_pins_a_pickled_checkpoint() -> None:
    for name, _repo, _rev in REVISIONS:
        paths = [e.path for e in load_lock(LOCKS / f"{name}.toml").files]
        assert not [p for p in paths if p.endswith((".bin", ".pth", ".pt", ".pkl"))], name
        assert any(p.endswith(".safetensors") for p in paths), name


# ------------------------------------------------------------ lock format: partial pins


def _one_entry(**fields: object) -> dict[str, object]:
    return {"name": "x", "kind": "checkpoint",
            "source": {"type": "hf", "repo": "a/b", "revision": "1" * 40},
            "file": [{"path": "f.bin", **fields}]}


def test_a_published_sha256_without_size_is_pending_and_checked_when_recorded() -> None:
    digest = sha(b"abc")
    lock = parse_lock(_one_entry(sha256=digest, pinned_by="first-download"), "t.toml")
    entry = lock.file("f.bin")
    assert entry.pending and lock.pending == (entry,)
    assert entry.matches(digest, 3) and not entry.matches(sha(b"abd"), 3)
    assert entry.recorded(digest, 3, dt.date(2026, 1, 2)).size == 3
    with pytest.raises(LockError, match="published"):
        entry.recorded(sha(b"abd"), 3, dt.date(2026, 1, 2))
    sized = LockedFile("g", size=10, pinned_by="first-download")
    assert sized.pending and not sized.matches(sha(b"x"), 11)
    with pytest.raises(LockError, match="size"):
        parse_lock(_one_entry(sha256=digest), "t.toml")  # no size and not first-download


# ------------------------------------------------------------ verify on an empty cache


def verify(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["verify", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_verify_explains_what_fetch_will_do_on_an_empty_cache(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    lock = LOCKS / "qwen3guard-gen-0.6b.toml"
    code, out, err = verify([str(lock), "--home", str(home), "--json"], capsys)
    assert code == 2
    document = json.loads(out)
    assert document["ok"] is False
    plan = {p["path"]: p for p in document["fetch_plan"]}
    assert len(plan) == 8
    where = "hf://Qwen/Qwen3Guard-Gen-0.6B@fada3b2f655b89601929198343c94cd2f64d93cc/"
    assert all(p["source"] == where + path for path, p in plan.items())
    # tokenizer.json: sha256 and size both published
    tok = plan["tokenizer.json"]
    assert tok["check"] == "published" and tok["size"] == 11_422_654
    assert "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4" in tok["action"]
    # the others: published sha256, size recorded at first download
    weights = plan["model.safetensors"]
    assert weights["check"] == "partly-published" and weights["size"] is None
    assert weights["sha256"] == PUBLISHED["qwen3guard-gen-0.6b"]["model.safetensors"][0]
    assert "records its size" in weights["action"]
    assert "not in the cache" in err and "guardrepro fetch" in err


def test_verify_lines_for_first_download_and_size_only_pins(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    code, out, _err = verify([str(LOCKS / "llama-guard-3-1b.toml"), "--home", home,
                              "--no-progress"], capsys)
    assert code == 2
    lines = [line.strip() for line in out.splitlines()]
    assert "6 of 6 file(s) not in the cache" in out
    config = next(line for line in lines if line.startswith("config.json: download"))
    assert "meta-llama/Llama-Guard-3-1B@acf7aafa60f0410f8f42b1fa35e077d705892029" in config
    assert "no hash is pinned yet" in config and "LFS sha256 (its ETag" in config
    weights = next(line for line in lines if line.startswith("model.safetensors: download"))
    assert "published size 2996982344 bytes" in weights
    # a repo whose files are all published: every line names its hash and size
    code, out, _err = verify([str(LOCKS / "shieldgemma-2b.toml"), "--home", home,
                              "--no-progress"], capsys)
    assert code == 2
    line = next(x for x in out.splitlines() if "tokenizer_config.json: download" in x)
    assert ("published sha256 20dc327cc0ddb4bad2ebc5042f561f89fc980855a87db593ed80ac07ca5efcba"
            " (47904 bytes)") in line


def test_verify_plan_after_a_first_download_names_the_recorded_pin(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = load_lock(LOCKS / "qwen3guard-gen-4b.toml")
    entry = lock.file("config.json").recorded(sha(b"{}"), 2, dt.date(2026, 3, 4))
    files = tuple(entry if e.path == "config.json" else e for e in lock.files)
    path = tmp_path / "q.toml"
    from guardrepro.artifacts.locks import save_lock

    save_lock(dataclasses.replace(lock, files=files, path=path), path)
    code, out, _err = verify([str(path), "--home", str(tmp_path / "h"), "--json"], capsys)
    assert code == 2
    plan = {p["path"]: p for p in json.loads(out)["fetch_plan"]}
    assert plan["config.json"]["check"] == "recorded"
    assert "recorded at its first download on 2026-03-04" in plan["config.json"]["action"]
    assert plan["vocab.json"]["check"] == "first-download"


# ------------------------------------------------------------ fetch from a loopback Hub


def _guard_repo(lock_name: str, overrides: dict[str, bytes] | None = None) -> HubRepo:
    """A loopback copy of the guard's repo: each listed file with small made-up bytes."""
    lock = load_lock(LOCKS / f"{lock_name}.toml")
    assert isinstance(lock.source, HfSource)
    files = {}
    for i, entry in enumerate(lock.files):
        data = (overrides or {}).get(entry.path, f"{entry.path} #{i}\n".encode() * (i + 1))
        files[entry.path] = HubFile(data, lfs=entry.path.endswith(".safetensors"))
    return HubRepo(lock.source.repo, lock.source.revision, files)


def test_fetch_of_a_guard_lock_pins_every_first_download_file(tmp_path: Path) -> None:
    lock = tmp_path / "qwen3guard-gen-4b.toml"
    lock.write_text((LOCKS / "qwen3guard-gen-4b.toml").read_text())
    repo = _guard_repo("qwen3guard-gen-4b")
    with HubServer(repo) as hub:
        result = run_fetch(hub, lock, tmp_path / "home", tmp_path)
    assert result["ok"], result
    assert {f[0]: (f[1], f[2], f[3], f[4]) for f in result["files"]} == {
        path: (sha(f.data), len(f.data), "downloaded", True) for path, f in repo.files.items()}
    assert load_lock(lock).pending  # the lock file is never rewritten: the cache's pin file
    recorded = with_cached_pins(load_lock(lock), tmp_path / "home")
    assert recorded.source.revision == "6ec42827da0c1ff11e7a49dc269d2e810d27e108"
    assert not recorded.pending
    for entry in recorded.files:
        assert (entry.sha256, entry.size) == (sha(repo.files[entry.path].data),
                                              len(repo.files[entry.path].data))
        assert entry.pinned_by == "first-download" and entry.pinned_at is not None
    assert lock.read_text().startswith("# Qwen3Guard-Gen-4B")  # header kept


def test_fetch_refuses_bytes_that_differ_from_a_published_hash(tmp_path: Path) -> None:
    lock = tmp_path / "qwen3guard-gen-0.6b.toml"
    text = (LOCKS / "qwen3guard-gen-0.6b.toml").read_text()
    lock.write_text(text)
    with HubServer(_guard_repo("qwen3guard-gen-0.6b")) as hub:
        result = run_fetch(hub, lock, tmp_path / "home", tmp_path)
    assert not result["ok"] and result["type"] == "IntegrityError"
    # every file is resolved before any download: the weights' LFS sha256 (the hub's
    # ETag) is not the published one, so the fetch stops there, naming both
    assert "4f3ce47ebd968cddb67de08d8764f8ede7c410a7d1fb9e08145a4c7a2f2e5c0f" in result["msg"]
    assert "model.safetensors" in result["msg"]
    assert lock.read_text() == text  # nothing recorded


def test_fetch_records_the_size_of_a_file_whose_sha256_is_published(tmp_path: Path) -> None:
    weights = bytes(range(256)) * 40
    config = b'{"model_type": "qwen3"}\n'
    lock = tmp_path / "mixed.toml"
    lock.write_text(
        "# test lock\n"
        'name = "mixed"\nkind = "checkpoint"\n\n[source]\ntype = "hf"\n'
        f'repo = "Qwen/Qwen3Guard-Gen-0.6B"\nrevision = "{"fada3b2f" + "0" * 32}"\n\n'
        f'[[file]]\npath = "config.json"\nsha256 = "{sha(config)}"\n'
        'pinned_by = "first-download"\n\n'
        f'[[file]]\npath = "model.safetensors"\nsize = {len(weights)}\n'
        'pinned_by = "first-download"\n')
    repo = HubRepo("Qwen/Qwen3Guard-Gen-0.6B", "fada3b2f" + "0" * 32,
                   {"config.json": HubFile(config, lfs=False),
                    "model.safetensors": HubFile(weights, lfs=True)})
    committed = tmp_path / "mixed.pinned.toml"  # `fetch --out`: the pinned lock to commit
    with HubServer(repo) as hub:
        result = run_fetch(hub, lock, tmp_path / "home", tmp_path, out=committed)
        assert result["ok"], result
        pinned = load_lock(committed)
        assert (pinned.file("config.json").sha256, pinned.file("config.json").size) == (
            sha(config), len(config))
        assert pinned.file("model.safetensors").sha256 == sha(weights)
        # later bytes that differ are refused against what was recorded
        repo.files["model.safetensors"] = HubFile(weights[::-1], lfs=True)
        refused = run_fetch(hub, committed, tmp_path / "home-2", tmp_path, "hf-home-2")
    assert not refused["ok"] and refused["type"] == "IntegrityError"
    assert sha(weights) in refused["msg"]


def test_verify_plan_for_a_package_lock_and_for_blobs_already_cached(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from guardrepro.artifacts.fetch import fetch_lock

    lock = LOCKS / "toy-guard.toml"
    home = tmp_path / "home"
    code, out, _err = verify([str(lock), "--home", str(home), "--json"], capsys)
    plan = json.loads(out)["fetch_plan"]
    assert code == 2 and {p["check"] for p in plan} == {"pinned"}
    assert all(p["action"].startswith(f"{p['path']}: copy from the guardrepro package")
               for p in plan)
    directory = fetch_lock(lock, home, progress=False).directory
    assert verify([str(lock), "--home", str(home)], capsys)[0] == 0
    shutil.rmtree(directory)  # the blobs stay: fetch only has to link them again
    code, out, _err = verify([str(lock), "--home", str(home), "--json"], capsys)
    plan = json.loads(out)["fetch_plan"]
    assert code == 2 and len(plan) == len(load_lock(lock).files)
    assert {p["check"] for p in plan} == {"cached"}
    assert all("no download" in p["action"] for p in plan)
