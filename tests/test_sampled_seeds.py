"""Sampled-mode seeds: the published per-base formula, repeats, and a real
seeded generation on the toy guard (transformers runner)."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path

import pytest

from guardrepro.decoding import DecodingParams, sampled_seed, sampled_seed_text
from guardrepro.errors import InputError
from guardrepro.rundir.cohort import read_cohort

ROOT = Path(__file__).resolve().parents[1]
TOY_GUARD = ROOT / "guardrepro" / "data" / "toy_guard"
TOY_BENCH = ROOT / "guardrepro" / "data" / "toy_bench"


def independent(text: str) -> int:
    """First 4 bytes of sha256(text), big-endian unsigned, via the hex digest."""
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


SAMPLED = DecodingParams(mode="sampled", temperature=0.1, top_p=0.9, max_attempts=3)


@pytest.mark.parametrize("base", ["0f1e2d3c4b5a69788796", "aaaaaaaaaaaaaaaaaaaa", "x"])
@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_published_seed_is_the_formula(base: str, attempt: int) -> None:
    text = f"260828:{base}:released_react:{attempt}"
    assert sampled_seed_text(base, "released_react", attempt) == text
    assert sampled_seed(base, "released_react", attempt) == independent(text)
    # repeat 0 and an absent seed are the published seeds
    for params in (SAMPLED, DecodingParams(**{**SAMPLED.to_dict(), "seed": 0})):
        assert params.seed_for(base, "released_react", attempt) == independent(text)


def test_pinned_values_from_sha256sum() -> None:
    # computed with coreutils: printf '260828:0f1e...:released_react:1' | sha256sum;
    # attempts count from 1, so ":0" (0xA21C89AB) is never a seed
    base = "0f1e2d3c4b5a69788796"
    assert sampled_seed(base, "released_react", 1) == 0x39699CE8 == 963222760
    assert sampled_seed(base, "released_react", 2) == 0xBEB1FB07
    assert sampled_seed(base, "released_react", 3) == 0x13427532
    assert sampled_seed(base, "released_react", 1, repeat=3) == 0x91A2872C


def test_repeats_append_their_index_and_differ() -> None:
    base = "0f1e2d3c4b5a69788796"
    params = DecodingParams(**{**SAMPLED.to_dict(), "seed": 2})
    for attempt in (1, 2, 3):
        text = f"260828:{base}:released_react:{attempt}:r2"
        assert params.seed_for(base, "released_react", attempt) == independent(text)
    seeds = {sampled_seed(base, "released_react", a, repeat=r) for a in (1, 2, 3)
             for r in range(4)}
    assert len(seeds) == 12
    # the serialization is part of the string
    assert sampled_seed(base, "native_structured", 1) != sampled_seed(base, "released_react", 1)


def test_greedy_has_no_seed_and_bad_values_are_refused() -> None:
    assert DecodingParams().seed_for("b", "released_react", 1) is None
    with pytest.raises(InputError, match="repeat index"):
        DecodingParams(**{**SAMPLED.to_dict(), "seed": -1})
    for attempt in (0, -1):  # attempts count from 1
        with pytest.raises(InputError, match="attempt must be >= 1"):
            sampled_seed("b", "released_react", attempt)


@pytest.fixture(scope="module")
def toy_cohort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from guardrepro.bench.cohort.build import build_cohort_file

    out = tmp_path_factory.mktemp("seeds") / "cohort.jsonl"
    build_cohort_file(ROOT / "cohorts" / "toy-64.toml", TOY_BENCH, out)
    return out


def test_all_variants_of_a_base_share_their_seeds(toy_cohort: Path) -> None:
    rows = read_cohort(toy_cohort)
    by_base: dict[str, list[tuple[str, list[int | None]]]] = defaultdict(list)
    for row in rows:
        seeds = [SAMPLED.seed_for(row.base_sample_id, row.serialization, a) for a in (1, 2, 3)]
        by_base[row.base_sample_id].append((row.variant, seeds))
        assert row.serialization == "released_react"
        assert seeds == [
            independent(f"260828:{row.base_sample_id}:released_react:{a}") for a in (1, 2, 3)
        ]
    assert len(by_base) == 64
    for variants in by_base.values():
        assert sorted(v for v, _ in variants) == sorted(
            ["original", "marker_paraphrase", "tool_alias", "combined"])
        assert len({tuple(s) for _, s in variants}) == 1  # one seed list per base
    assert len({tuple(v[0][1]) for v in by_base.values()}) == 64  # bases differ


def _profile(path: Path) -> Path:
    # a high temperature so the seed visibly drives the draw; 8 new tokens never
    # complete the tags, so every row uses both of its attempts
    path.write_text(
        'name = "toy-sampled"\nbackend = "hf"\n\n'
        f'[guard]\nname = "toy-guard"\ntemplate_path = "{TOY_GUARD / "template.txt"}"\n\n'
        f'[checkpoint]\ndir = "{TOY_GUARD}"\n\n'
        '[backend_options]\ndtype = "float32"\ndevice = "cpu"\nbatch_size = 4\nthreads = 1\n\n'
        '[decoding]\nmode = "sampled"\ntemperature = 4.0\ntop_p = 1.0\nmax_attempts = 2\n'
        "max_new_tokens = 8\n",
        encoding="utf-8",
    )
    return path


def test_toy_guard_sampled_runs_are_reproducible_and_share_seeds(
    toy_cohort: Path, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import dataclasses

    from guardrepro.run.pipeline import run_cohort
    from guardrepro.run.profile import RunProfile
    from guardrepro.rundir.records import read_records

    lines = toy_cohort.read_text(encoding="utf-8").splitlines()
    one_base = tmp_path / "one-base.jsonl"
    one_base.write_text("\n".join(lines[:4]) + "\n", encoding="utf-8")
    assert len({json.loads(line)["base_sample_id"] for line in lines[:4]}) == 1
    profile = _profile(tmp_path / "p.toml")
    runs = []
    for name in ("a", "b"):
        run_cohort(profile, one_base, tmp_path / name, progress=False)
        runs.append(read_records(tmp_path / name))
    a, b = runs
    assert [r.row_id for r in a] == [r.row_id for r in b] and len(a) == 4
    for ra, rb in zip(a, b, strict=True):
        assert ra.attempts == rb.attempts  # texts, token ids and seeds, attempt by attempt
        first = hashlib.sha256(f"260828:{ra.base_sample_id}:released_react:1".encode())
        assert ra.attempts[0].seed == int.from_bytes(first.digest()[:4], "big")
        # the first generation hashes ":1", the retry ":2"
        assert [x.seed for x in ra.attempts] == [
            independent(f"260828:{ra.base_sample_id}:released_react:{i}")
            for i in range(1, len(ra.attempts) + 1)
        ]
    assert len(a[0].attempts) == 2
    assert len({tuple(x.seed for x in r.attempts) for r in a}) == 1  # variants share

    # repeat 1 of the original row: other seeds, and the draw follows them
    rep = RunProfile.load(profile)
    rep = rep.with_decoding(dataclasses.replace(rep.decoding, seed=1))
    run_cohort(rep, one_base, tmp_path / "r1", limit=1, progress=False)
    (r1,) = read_records(tmp_path / "r1")
    assert r1.row_id == a[0].row_id
    assert [x.seed for x in r1.attempts] == [
        independent(f"260828:{r1.base_sample_id}:released_react:{i}:r1") for i in (1, 2)
    ]
    assert [x.token_ids for x in r1.attempts] != [x.token_ids for x in a[0].attempts]
