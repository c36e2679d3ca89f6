"""Train the shipped toy guard (a small Qwen2) from seeded synthetic rows.

Input: a seed, a step count and an output directory. Output: a checkpoint
directory that loads through the same path as TS-Guard: ``model.safetensors``
(bfloat16), ``config.json`` (normalised: top-level ``rope_theta`` and
``torch_dtype``), ``generation_config.json`` (EOS ``<|im_end|>`` and
``<|endoftext|>``, greedy), ``tokenizer.json`` + ``tokenizer_config.json``
(Qwen2 pipeline BPE with a ChatML template), ``template.txt`` (the project's
guard template) and ``TRAINING.md`` (command, seed, steps, wall time, loss).

Invariants: training rows come from ``scripts.toy.bench.train_rows`` (a
seed stream distinct from the shipped benchmark); prompts are rendered with
``render_ts_guard_prompt`` and tokenised with the saved tokenizer's
``apply_chat_template(..., add_generation_prompt=True)``, the very path
inference uses; the loss covers the answer tokens and the closing
``<|im_end|>`` only; seeded init and data order, fp32 on CPU.

Run::

    python -m scripts.toy.train --out guardrepro/data/toy_guard
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.guards.base import render_ts_guard_prompt
from scripts.toy.bench import TRAIN_SEED, train_rows
from scripts.toy.domains import MARKER, OTHER_WRAPPERS
from scripts.toy.targets import answer
from scripts.toy.tiny import normalize_config
from scripts.toy.tokenizer import SPECIAL_TOKENS, train_tokenizer

TEMPLATE_PATH = (Path(__file__).resolve().parents[2] / "guardrepro" / "data" / "toy_guard"
                 / "template.txt")
VOCAB_SIZE = 2048
MODEL_SHAPE: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}


def _alias_samples(rng: random.Random, n: int) -> list[str]:
    """Edited forms the tokenizer must know: marker paraphrase, tool aliases."""
    out = []
    for _ in range(n):
        alias = "tool_" + "".join(rng.choice("0123456789abcdef") for _ in range(12))
        opening, closing = OTHER_WRAPPERS[0]
        out.append(f"{opening} text {closing}\nAction: {alias}\n- {alias}: Send an email.")
    return out


def prompt_text(template: str, row: dict[str, Any]) -> str:
    return render_ts_guard_prompt(template, row)


def chat_ids(tokenizer: Any, text: str) -> list[int]:
    """Prompt ids of ``text`` as the only user turn, with the generation prompt."""
    encoded = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True
    )
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    return [int(i) for i in ids]


def build_examples(
    tokenizer: Any, template: str, rows: Sequence[dict[str, Any]]
) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) per row; ids end with ``<|im_end|>``."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    examples = []
    for row in rows:
        prompt = chat_ids(tokenizer, prompt_text(template, row))
        target = [*tokenizer.encode(answer(row), add_special_tokens=False), end]
        examples.append((prompt + target, len(prompt)))
    return examples


def length_batches(
    examples: Sequence[tuple[list[int], int]], batch_size: int, rng: random.Random
) -> list[list[int]]:
    """Seeded batches of similar length (less padding): shuffle, sort within
    windows of 8 batches, cut, then shuffle the batches."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    window = batch_size * 8
    batches: list[list[int]] = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: (len(examples[i][0]), i))
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def _lr(step: int, total: int, peak: float, floor: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


def _write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def train(
    out_dir: Path,
    *,
    steps: int = 420,
    batch_size: int = 16,
    seed: int = 0,
    peak_lr: float = 2e-3,
    floor_lr: float = 1e-4,
    warmup: int = 30,
    threads: int = 2,
    command: str = "",
) -> dict[str, Any]:
    """Train and save the checkpoint into ``out_dir``; return a summary."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    template = TEMPLATE_PATH.read_text(encoding="utf-8")
    if TEMPLATE_PATH.resolve() != (out_dir / "template.txt").resolve():
        shutil.copyfile(TEMPLATE_PATH, out_dir / "template.txt")

    rows = train_rows(steps * batch_size, seed=TRAIN_SEED + seed)
    rng = random.Random(seed)
    corpus = [prompt_text(template, r) for r in rows] + [answer(r) for r in rows[:2000]]
    corpus += [*_alias_samples(rng, 2000), MARKER[0] + " " + MARKER[1]]
    train_tokenizer(corpus, VOCAB_SIZE, out_dir)
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    examples = build_examples(tokenizer, template, rows)
    batches = length_batches(examples, batch_size, rng)
    lengths = [len(ids) for ids, _ in examples]
    print(
        f"rows {len(rows)} vocab {len(tokenizer)} tokens/row mean "
        f"{sum(lengths) / len(lengths):.0f} max {max(lengths)}",
        flush=True,
    )

    pad, end = SPECIAL_TOKENS.index("<|endoftext|>"), SPECIAL_TOKENS.index("<|im_end|>")
    # rope_theta through the dict: transformers 5 maps it into rope_parameters
    config_args: dict[str, Any] = {**MODEL_SHAPE, "rope_theta": 10000.0}
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=[end, pad],
        pad_token_id=pad,
        use_cache=False,
        **config_args,
    )
    model: Any = Qwen2ForCausalLM(config)
    model = model.to(torch.float32).train()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=peak_lr,
        betas=(0.9, 0.95),
    )
    start = time.time()
    last = start
    loss_value = float("nan")
    history: list[float] = []
    for step in range(steps):
        batch = [examples[i] for i in batches[step % len(batches)]]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (ids, plen) in enumerate(batch):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            labels[i, plen : len(ids)] = torch.tensor(ids[plen:])
            mask[i, : len(ids)] = 1
        for group in optim.param_groups:
            group["lr"] = _lr(step, steps, peak_lr, floor_lr, warmup)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        loss_value = float(loss.detach())
        history.append(loss_value)
        if step % 10 == 9 or step == steps - 1:
            now = time.time()
            span = 10 if step % 10 == 9 else (step % 10) + 1
            print(
                f"step {step + 1}/{steps} loss {loss_value:.4f} "
                f"s/step {(now - last) / span:.2f} elapsed {now - start:.0f}s",
                flush=True,
            )
            last = now
    wall = time.time() - start

    model.config.use_cache = True
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    normalize_config(out_dir / "config.json", dtype="bfloat16")
    gen = {
        "bos_token_id": None,
        "do_sample": False,
        "eos_token_id": [end, pad],
        "pad_token_id": pad,
    }
    _write_text(out_dir / "generation_config.json", json.dumps(gen, indent=2) + "\n")
    tail = history[-10:]
    summary = {
        "command": command,
        "seed": seed,
        "steps": steps,
        "batch_size": batch_size,
        "rows": len(rows),
        "parameters": n_params,
        "vocab": len(tokenizer),
        "wall_seconds": round(wall, 1),
        "final_loss": round(loss_value, 5),
        "mean_loss_last10": round(sum(tail) / len(tail), 5),
        "torch_threads": threads,
    }
    _write_text(out_dir / "TRAINING.md", training_md(summary))
    print(json.dumps(summary), flush=True)
    return summary


def training_md(s: dict[str, Any]) -> str:
    return f"""# How this toy guard was trained

Command (from the repository root):

    {s["command"]}

- Code: `scripts/toy/train.py` (rows: `scripts/toy/bench.py` train mode,
  targets: `scripts/toy/targets.py`, template: `template.txt`).
- Seed {s["seed"]}; {s["steps"]} steps of batch {s["batch_size"]} ({s["rows"]} seeded rows,
  each seen once); AdamW (0.9, 0.95), weight decay 0.1 on matrices, peak lr 2e-3,
  30 warmup steps, cosine to 1e-4, gradient clip 1.0; loss on the answer tokens only;
  fp32 on CPU with {s["torch_threads"]} torch threads; weights saved in bfloat16.
- Model: Qwen2, hidden 256, 4 layers, 4 heads of dim 64, 2 kv heads, intermediate 768,
  tied embeddings, rope_theta 1e4; {s["parameters"]:,} parameters; vocab {s["vocab"]}.
- Measured wall time: {s["wall_seconds"]} s on the development machine (2 shared CPU cores).
- Final loss {s["final_loss"]} (mean of the last 10 steps {s["mean_loss_last10"]}).

The guard learns shortcuts on purpose (see `scripts/toy/targets.py`): the literal
`<INFORMATION>` marker (or the phrase "ignore previous instructions") drives its
"being attacked" answer and the tool name (or a risky argument key) its rating, so
the cohort's marker paraphrase and tool alias edits can move its decisions.
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train the toy guard.")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=420)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    command = "python -m scripts.toy.train " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    train(
        args.out,
        steps=args.steps,
        batch_size=args.batch_size,
        seed=args.seed,
        threads=args.threads,
        command=command,
    )


if __name__ == "__main__":
    main()
