"""Pure functions between OpenAI shapes and engine records: prompts in, JSON out.
No I/O here, so everything is tested with golden JSON."""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from typing import Any

from ...engine.request import ConstraintPlan, GenerateRequest, SessionSpec
from ...types import FinishEvent, SamplingParams, StopSpec, TokenEvent, Usage
from ..chatflow import output_limit
from .schemas import Common

__all__ = [
    "new_id",
    "requests_for",
    "usage_json",
    "chat_logprob_json",
    "chat_response",
    "chat_chunk",
    "completion_response",
    "completion_chunk",
    "finish_reason",
    "usage_chunk",
]


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def requests_for(
    tokens: list[int], common: Common, n_ctx: int, plan: ConstraintPlan | None = None, *, default_max: int
) -> list[GenerateRequest]:
    """One engine request per choice. With a seed, choice i uses seed + i so that n > 1
    gives different texts that are still reproducible. `plan` defaults to the request's
    grammar, active from the first token. `default_max` limits constrained output when
    the request sets no limit (see chatflow.output_limit)."""
    if plan is None and common.grammar is not None:
        plan = ConstraintPlan(common.grammar, label="json")
    max_tokens = output_limit(plan, common.max_tokens, default_max, n_ctx - len(tokens))
    stop = StopSpec(max_tokens=max_tokens, stop=common.stop)
    out = []
    for i in range(common.n):
        sampling: SamplingParams = common.sampling
        if sampling.seed is not None and i:
            sampling = replace(sampling, seed=sampling.seed + i)
        session = SessionSpec(context_id=common.session) if common.session else None
        out.append(
            GenerateRequest(
                tokens=list(tokens),
                sampling=sampling,
                stop=stop,
                constraint=plan,
                session=session,
                repetition=common.repetition,
                cache=common.cache_prompt,
            )
        )
    return out


def finish_reason(event: FinishEvent) -> str:
    """OpenAI's reasons, plus "error" when the engine had to end a choice it could not
    complete (the message says why)."""
    return {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}.get(event.reason, "error")


def finish_extra(event: FinishEvent) -> dict[str, Any]:
    """Why a choice ended early, when there is more to say than the reason."""
    return {"finish_message": event.message} if event.message else {}


def usage_json(usages: list[Usage]) -> dict[str, Any]:
    """Prompt tokens count once (all choices share the prompt); completions add up."""
    prompt = usages[0].prompt_tokens if usages else 0
    completion = sum(u.completion_tokens for u in usages)
    cached = usages[0].cached_tokens if usages else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _text_of(token_bytes: bytes) -> str:
    return token_bytes.decode("utf-8", errors="replace")


def _lp(value: float | None) -> float | None:
    """JSON has no -inf: a token the constraint forbade reports OpenAI's floor instead."""
    if value is None:
        return None
    return max(value, -9999.0)


def chat_logprob_json(event: TokenEvent) -> dict[str, Any]:
    return {
        "token": _text_of(event.token_bytes),
        "logprob": _lp(event.logprob),
        "bytes": list(event.token_bytes),
        "top_logprobs": [
            {"token": _text_of(t.text), "logprob": _lp(t.logprob), "bytes": list(t.text)} for t in event.top
        ],
    }


def chat_response(
    rid: str, model: str, choices: list[tuple[str, FinishEvent, list[TokenEvent] | None]]
) -> dict[str, Any]:
    """A whole chat.completion. Each choice: (text, finish event, token events if logprobs)."""
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": text},
                "logprobs": {"content": [chat_logprob_json(e) for e in events]}
                if events is not None
                else None,
                "finish_reason": finish_reason(fin),
                **finish_extra(fin),
            }
            for i, (text, fin, events) in enumerate(choices)
        ],
        "usage": usage_json([fin.usage for _, fin, _ in choices]),
    }


def chat_chunk(
    rid: str,
    model: str,
    created: int,
    index: int,
    delta: dict[str, Any],
    *,
    finish: str | None = None,
    logprobs: list[dict[str, Any]] | None = None,
    with_usage_field: bool = False,
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": index,
                "delta": delta,
                "logprobs": {"content": logprobs} if logprobs is not None else None,
                "finish_reason": finish,
            }
        ],
    }
    if with_usage_field:
        chunk["usage"] = None
    return chunk


def usage_chunk(rid: str, model: str, created: int, obj: str, usages: list[Usage]) -> dict[str, Any]:
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage_json(usages),
    }


def completion_logprobs_json(events: list[TokenEvent], offset: int) -> dict[str, Any]:
    tokens, lps, tops, offsets = [], [], [], []
    pos = offset
    for e in events:
        text = _text_of(e.token_bytes)
        tokens.append(text)
        lps.append(_lp(e.logprob))
        tops.append({_text_of(t.text): _lp(t.logprob) for t in e.top})
        offsets.append(pos)
        pos += len(text)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def completion_response(
    rid: str, model: str, choices: list[tuple[str, FinishEvent, list[TokenEvent] | None]], prefix_len: int = 0
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": i,
                "text": text,
                "logprobs": completion_logprobs_json(events, prefix_len) if events is not None else None,
                "finish_reason": finish_reason(fin),
                **finish_extra(fin),
            }
            for i, (text, fin, events) in enumerate(choices)
        ],
        "usage": usage_json([fin.usage for _, fin, _ in choices]),
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
