"""OpenAI's text completions (`POST /v1/completions`): the JSON of a whole answer and of
its stream chunks, legacy logprobs with an echoed prompt, and the renderer that turns the
chat pipeline's steps into them. No I/O here, like adapter.py."""

from __future__ import annotations

import codecs
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import EngineError
from ...types import FinishEvent, PromptLogprob, TokenEvent, TopLogprob, Usage
from .adapter import (
    NOTHING,
    Base,
    finish_chunk,
    finish_extra,
    finish_reason,
    json_logprob,
    sse_frame,
    token_text,
    usage_json,
)

if TYPE_CHECKING:
    from ...chat.pipeline import Choice, Delta, Done

__all__ = [
    "Echo",
    "completion_logprobs_json",
    "completion_usage_json",
    "completion_response",
    "completion_chunk",
    "CompletionRenderer",
]


@dataclass(frozen=True)
class Echo:
    """A completion choice's echoed prompt: its text, and with `logprobs` the bytes of its
    first token and the engine's scores of the others (FinishEvent.prompt_logprobs)."""

    text: str
    first: bytes = b""
    scores: tuple[PromptLogprob, ...] | None = None


def _top_json(text: str, logprob: float | None, top: tuple[TopLogprob, ...]) -> dict[str, float | None]:
    """The alternatives at one position, with the actual token added as OpenAI does."""
    out = {token_text(t.text): json_logprob(t.logprob) for t in top}
    if logprob is not None:
        out.setdefault(text, json_logprob(logprob))
    return out


def completion_logprobs_json(
    events: list[TokenEvent], offset: int, echo: Echo | None = None
) -> dict[str, Any]:
    """OpenAI's legacy logprobs. With a scored `echo`, the prompt's tokens come first (the
    first one without a logprob: nothing precedes it). `text_offset` counts characters of
    the choice's text, from `offset` (where the generated text starts) or, when the prompt
    is scored, from its start."""
    tokens: list[str] = []
    lps: list[float | None] = []
    tops: list[dict[str, float | None] | None] = []
    offsets: list[int] = []
    if echo is not None and echo.scores is not None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pos = 0
        pieces = [echo.first, *(p.text for p in echo.scores)]
        for i, piece in enumerate(pieces):
            text = token_text(piece)
            tokens.append(text)
            offsets.append(pos)
            pos += len(decoder.decode(piece))  # the echoed text decodes the prompt's bytes as one
            if i == 0:
                lps.append(None)
                tops.append(None)
            else:
                score = echo.scores[i - 1]
                lps.append(json_logprob(score.logprob))
                tops.append(_top_json(text, score.logprob, score.top))
        offset = len(echo.text)
    pos = offset
    for e in events:
        text = token_text(e.token_bytes)
        tokens.append(text)
        lps.append(json_logprob(e.logprob))
        tops.append(_top_json(text, e.logprob, e.top))
        offsets.append(pos)
        pos += len(text)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def completion_usage_json(usages: list[Usage], n: int) -> dict[str, Any]:
    """Each prompt counts once however many choices (`n`) it has; completions add up."""
    body = usage_json(usages)
    prompt = sum(u.prompt_tokens for u in usages[::n])
    body["prompt_tokens"] = prompt
    body["total_tokens"] = prompt + body["completion_tokens"]
    body["prompt_tokens_details"] = {"cached_tokens": sum(u.cached_tokens for u in usages[::n])}
    return body


def completion_response(
    rid: str,
    model: str,
    choices: list[tuple[str, FinishEvent, list[TokenEvent] | None]],
    echoes: list[Echo] | None = None,
    n: int = 1,
) -> dict[str, Any]:
    """Choices in order, `n` per prompt; `echoes[i]` is choice i's echoed prompt (its text
    already starts `choices[i]`'s text)."""
    echo_of: list[Echo | None] = list(echoes) if echoes else [None] * len(choices)
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": i,
                "text": text,
                "logprobs": completion_logprobs_json(events, len(echo.text) if echo else 0, echo)
                if events is not None
                else None,
                "finish_reason": finish_reason(fin),
                **finish_extra(fin),
            }
            for i, ((text, fin, events), echo) in enumerate(zip(choices, echo_of, strict=True))
        ],
        "usage": completion_usage_json([fin.usage for _, fin, _ in choices], n),
    }


def completion_chunk(
    rid: str,
    model: str,
    created: int,
    index: int,
    text: str,
    *,
    finish: str | None = None,
    logprobs: dict[str, Any] | None = None,
    with_usage_field: bool = False,
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}],
    }
    if with_usage_field:
        chunk["usage"] = None
    return chunk


class CompletionRenderer(Base):
    """POST /v1/completions, `n` choices per prompt. `echoes[i]`: prompt i echoed (its
    text, and with `score` its first token's bytes; the engine's scores of the rest come
    with each choice's finish)."""

    obj = "text_completion"

    def __init__(
        self,
        rid: str,
        model: str,
        *,
        streaming: bool,
        include_usage: bool,
        logprobs: bool,
        n: int,
        echoes: list[Echo],
        score: bool,
    ) -> None:
        super().__init__(rid, model, streaming=streaming, include_usage=include_usage)
        self.logprobs = logprobs
        self.per_prompt = n
        self.echoes = echoes
        self.score = score

    def _chunk(self, i: int, text: str, **kw: Any) -> dict[str, Any]:
        return completion_chunk(
            self.rid, self.model, self.created, i, text, with_usage_field=self.include_usage, **kw
        )

    def opening(self) -> list[bytes]:
        echo = self.echoes[0].text if self.echoes else ""
        return [sse_frame(self._chunk(i, echo)) for i in range(self.n)] if echo else []

    def delta(self, step: Delta) -> Sequence[bytes]:
        if not self.streaming:
            return NOTHING
        text = "".join(p.text for p in step.pieces)
        if not text and not self.logprobs:
            return NOTHING
        lp = completion_logprobs_json([step.token], 0) if self.logprobs and step.token else None
        return [sse_frame(self._chunk(step.index, text, logprobs=lp))]

    def last(self, step: Done) -> list[bytes]:
        c = step.choice
        chunk = self._chunk(c.index, "".join(p.text for p in step.pieces), finish=finish_reason(c.finish))
        return [sse_frame(finish_chunk(chunk, c.finish, c.check))]

    def body(self, choices: list[Choice]) -> dict[str, Any]:
        texts: list[tuple[str, Any, Any]] = []
        echoes: list[Echo] = []
        for c in choices:
            echo = self.echoes[c.index // self.per_prompt]
            if self.score:
                if c.finish.prompt_logprobs is None:
                    raise EngineError("the prompt could not be scored (the KV cache is full?)")
                echo = Echo(echo.text, echo.first, c.finish.prompt_logprobs)
            texts.append((echo.text + c.text, c.finish, c.tokens))
            echoes.append(echo)
        body = completion_response(self.rid, self.model, texts, echoes, self.per_prompt)
        for out, c in zip(body["choices"], choices, strict=True):
            if c.check is not None:
                out["schema_check"] = c.check
        return body
