"""Check a checkpoint's real chat template against what is published about it.

Input: a guard adapter (its ``chat_template_pins``), the checkpoint directory,
its model revision (``"<repo>@<revision>"`` for a hub lock) and the loaded
``PromptTokenizer``. Output: the names of the checks that passed (empty when
nothing is published for that checkpoint); any mismatch is a ``PromptError``
naming the file or item, the expected and the observed value.

Checks, each only where a value is published (``guards.base.ChatTemplatePin``):

- ``tokenizer_config.json``: the sha256 of the file's bytes;
- ``chat_template``: the sha256 (UTF-8) of the template string the tokenizer
  actually uses (it may come from ``tokenizer_config.json`` or from a
  separate template file, so the file hash alone would not prove it);
- ``generation_suffix``: a probe conversation (one user turn, one assistant
  turn, as every agent step is rendered) with the generation prompt must end
  with the published text;
- ``score_token_ids``: each score token encodes to exactly its published id.

A checkpoint whose revision has no pin (a local or test checkpoint, another
revision) is not checked here; its template hash is still recorded in the
run's provenance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import read_hashed
from guardrepro.errors import PromptError
from guardrepro.guards.base import ChatTemplatePin
from guardrepro.schema import sha256_text

PROBE = [{"role": "user", "content": "Check my balance."},
         {"role": "assistant", "content": "Action: get_balance\nAction Input: {}"}]


def pin_for(guard: Any, model_revision: str) -> ChatTemplatePin | None:
    """The guard's published pin for ``model_revision``, if any."""
    for pin in getattr(guard, "chat_template_pins", ()):
        if pin.model_revision == model_revision:
            return pin
    return None


def _mismatch(where: str, what: str, expected: object, observed: object) -> PromptError:
    return PromptError(f"{where}: {what} differs from the published value: expected"
                       f" {expected!r}, observed {observed!r}; this is not the checkpoint"
                       " the guard's published figures were made with")


def check_pin(pin: ChatTemplatePin, checkpoint_dir: Path, tokenizer: Any) -> list[str]:
    """Every published item of ``pin`` checked against the checkpoint (see module doc)."""
    done = []
    label = f"{pin.model_revision} ({checkpoint_dir})"
    if pin.tokenizer_config_sha256 is not None:
        path = checkpoint_dir / "tokenizer_config.json"
        try:
            observed = read_hashed(path)[1]
        except OSError as exc:
            raise PromptError(f"{path}: cannot read: {exc}") from exc
        if observed != pin.tokenizer_config_sha256:
            raise _mismatch(str(path), "sha256", pin.tokenizer_config_sha256, observed)
        done.append("tokenizer_config.json")
    if pin.template_sha256 is not None:
        observed = sha256_text(tokenizer.chat_template)
        if observed != pin.template_sha256:
            raise _mismatch(label, "chat template sha256", pin.template_sha256, observed)
        done.append("chat_template")
    if pin.generation_suffix is not None:
        rendered = tokenizer.render_messages(PROBE)
        if not rendered.endswith(pin.generation_suffix):
            tail = rendered[-len(pin.generation_suffix) - 10:]
            raise _mismatch(label, "end of the rendered prompt", pin.generation_suffix, tail)
        done.append("generation_suffix")
    for token, want in pin.score_token_ids:
        got = tokenizer.single_token_id(token)
        if got != want:
            raise _mismatch(label, f"id of score token {token!r}", want, got)
        done.append(f"score_token:{token}")
    return done


def check_chat_template(guard: Any, checkpoint_dir: Path, model_revision: str,
                        tokenizer: Any) -> list[str]:
    """``check_pin`` for the guard's pin of ``model_revision`` (nothing when none)."""
    pin = pin_for(guard, model_revision)
    return [] if pin is None else check_pin(pin, Path(checkpoint_dir), tokenizer)
