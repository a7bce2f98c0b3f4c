"""The four workloads as request bodies, one body per model and workload, sent unchanged to
every server (llamay and llama-server read the same fields).

A trained model (the default model) gets chat requests and copies, or not, of its own accord:
extraction through `response_format` (a JSON schema of string fields), a quote, a rewritten
file, a story. A random-weight model copies nothing by itself, so it gets plain completions
whose output a GBNF grammar forces to be the text to copy (the grammar's only sentence is that
text); the text is in the prompt too, so prompt lookup can find it. Its free-text workload has
no grammar and its end-of-generation tokens banned, so it runs to max_tokens like the others.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..serve.load import plain_sampling
from .texts import NOTE_FIELDS, NOTE_SCHEMA, PASSAGE, QUESTION, clinical_note, edited_file

__all__ = ["FORCING", "NAMES", "Workload", "gbnf_literal", "workloads"]

NAMES = ("extraction", "quote", "rewrite", "free_text")
COPYING = frozenset({"extraction", "quote", "rewrite"})
BAN_BIAS = -100.0
FORCING = (
    "GBNF grammar (the `grammar` field, on both servers) whose only sentence is the text to copy: "
    "the extraction's JSON, the passage, the edited file, each cut at a line or word to fit max_tokens "
    "(llamay refuses a request whose shortest answer exceeds it); the free-text workload has no "
    "grammar and its end-of-generation tokens banned by logit_bias"
)


@dataclass(frozen=True)
class Workload:
    """One request: `path` (/v1/chat/completions or /v1/completions) and its `body` (without
    streaming options, which the client adds). `copies`: the output is mostly copied text."""

    name: str
    path: str
    body: dict[str, Any]
    copies: bool
    prompt_chars: int


def gbnf_literal(text: str) -> str:
    """A GBNF grammar whose only sentence is `text` (ASCII), for llguidance and llama.cpp alike."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            raise ValueError(f"not printable ASCII: {ch!r}")
    return 'root ::= "' + "".join(out) + '"'


_FIELD_LIST = ", ".join(NOTE_FIELDS)
_EXTRACT = (
    "Extract these fields from the discharge note below, copying each value exactly as the note "
    f"writes it: {_FIELD_LIST}. Answer with JSON only.\n\n"
)
_QUOTE_SYSTEM = "Answer from the retrieved passage. When asked to quote, quote it word for word."
_QUOTE_USER = "Retrieved passage:\n\n{passage}\n\nQuote the whole passage, word for word, with nothing added."
_REWRITE = (
    "Here is a Python file.\n\n```python\n{file}```\n\n{instruction} Return the whole file with only "
    "that line changed, in one ```python block, and nothing else."
)


def _chat(name: str, messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> Workload:
    body = {"messages": messages, **plain_sampling(max_tokens), **extra}
    chars = sum(len(m["content"]) for m in messages)
    return Workload(name, "/v1/chat/completions", body, name in COPYING, chars)


def fit(text: str, budget: int, count: Callable[[str], int]) -> str:
    """The longest prefix of `text` ending at a line or word break that `count` puts at
    `budget` tokens or fewer (all of it if it fits)."""
    if count(text) <= budget:
        return text
    cuts = [i for i, ch in enumerate(text) if ch in " \n"]
    lo, hi = 0, len(cuts) - 1  # find the last cut that fits
    best = ""
    while lo <= hi:
        mid = (lo + hi) // 2
        head = text[: cuts[mid]]
        if count(head) <= budget:
            best, lo = head, mid + 1
        else:
            hi = mid - 1
    return best


def _forced(name: str, prompt: str, text: str | None, max_tokens: int, banned: list[int]) -> Workload:
    body: dict[str, Any] = {"prompt": prompt, **plain_sampling(max_tokens)}
    if text is not None:
        body["grammar"] = gbnf_literal(text)
    else:
        body["logit_bias"] = {str(t): BAN_BIAS for t in banned}
    return Workload(name, "/v1/completions", body, name in COPYING, len(prompt))


def workloads(
    trained: bool, max_tokens: int, banned: list[int], count: Callable[[str], int]
) -> list[Workload]:
    """The four workloads for a trained model (chat, copying of its own accord) or for a
    random-weight one (completions, copying forced by grammar; `banned`: its end-of-generation
    tokens, banned in free text; `count`: its token count of a text, to fit the forced ones)."""
    note, f = clinical_note(), edited_file()
    quote_user = _QUOTE_USER.format(passage=PASSAGE)
    rewrite_user = _REWRITE.format(file=f.original, instruction=f.instruction)
    if trained:
        schema = {"type": "json_schema", "json_schema": {"name": "discharge", "schema": NOTE_SCHEMA}}
        return [
            _chat(
                "extraction",
                [{"role": "user", "content": _EXTRACT + note}],
                max_tokens,
                response_format=schema,
            ),
            _chat(
                "quote",
                [{"role": "system", "content": _QUOTE_SYSTEM}, {"role": "user", "content": quote_user}],
                max_tokens,
            ),
            _chat("rewrite", [{"role": "user", "content": rewrite_user}], max_tokens),
            _chat("free_text", [{"role": "user", "content": QUESTION}], max_tokens),
        ]
    answer = "\n\nAnswer:\n"
    budget = max_tokens - 8  # room for the end of generation and tokenisation at the cut
    extraction = fit(json.dumps(NOTE_FIELDS, indent=2), budget, count)
    return [
        _forced("extraction", _EXTRACT + note + answer, extraction, max_tokens, banned),
        _forced(
            "quote",
            f"{_QUOTE_SYSTEM}\n\n{quote_user}{answer}",
            fit(PASSAGE, budget, count),
            max_tokens,
            banned,
        ),
        _forced(
            "rewrite",
            rewrite_user + answer,
            fit(f"```python\n{f.edited}```", budget, count),
            max_tokens,
            banned,
        ),
        _forced("free_text", QUESTION + answer, None, max_tokens, banned),
    ]
