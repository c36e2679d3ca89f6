"""Train a small byte-level BPE tokenizer with Qwen2's pipeline.

Input: an iterable of training texts. Output: a directory that
``transformers.AutoTokenizer`` loads as a Qwen2 tokenizer with identical ids
to the ``tokenizers`` object trained here (NFC normaliser, Qwen's split
regex, ByteLevel without its own regex), special tokens ``<|endoftext|>``,
``<|im_start|>``, ``<|im_end|>`` at ids 0, 1, 2, and a ChatML chat template
that, like Qwen2.5's, inserts a default system message when none is given.

Transformers 5 loads a ``model_type=qwen2`` directory through
``Qwen2Tokenizer``, which rebuilds the pre-tokenizer; training with the same
pipeline is what keeps the ids identical.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from guardrepro.artifacts.store import atomic_write_bytes

QWEN_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
DEFAULT_SYSTEM = "You are a careful safety guard."

# ChatML, with a default system turn when the conversation has none.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: Path) -> Path:
    """Train on ``texts`` and save ``tokenizer.json`` + ``tokenizer_config.json``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    for index, token in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(token) == index, token
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 32768,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "bos_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }
    atomic_write_bytes(
        out_dir / "tokenizer_config.json",
        (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode("utf-8"),
    )
    return out_dir
