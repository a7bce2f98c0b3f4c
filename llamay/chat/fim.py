"""Fill-in-the-middle prompts: the code a model should write between a prefix and a suffix
(OpenAI's `suffix` on /v1/completions, Ollama's on /api/generate)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import InvalidRequest

if TYPE_CHECKING:
    from ..runtime import LoadedModel

__all__ = ["fim_tokens"]


def fim_tokens(lm: LoadedModel, prefix: str | Sequence[int], suffix: str) -> list[int]:
    """The prompt in the prefix-suffix-middle order code models are trained on:
    [BOS] <fim_prefix> prefix <fim_suffix> suffix <fim_middle>; what the model writes next
    is the middle. Text is tokenized as plain text, so a caller cannot write the model's
    special tokens into it. InvalidRequest for a model without fill-in-the-middle tokens."""
    model = lm.model
    fim = model.fim_tokens()
    if fim is None:
        raise InvalidRequest(
            f"model '{lm.name}' cannot fill in the middle: its GGUF declares no fill-in-the-middle "
            "tokens (prefix, suffix and middle); 'suffix' needs a code model trained for it",
            param="suffix",
        )
    pre, suf, mid = fim
    if isinstance(prefix, str):
        head = model.tokenize(prefix, add_special=False, parse_special=False)
    else:
        head = list(prefix)
        model.check_tokens(head)
    tail = model.tokenize(suffix, add_special=False, parse_special=False)
    bos = [model.bos_id] if model.add_bos and model.bos_id >= 0 else []
    return [*bos, pre, *head, suf, *tail, mid]
