"""Helpers the OpenAI routes share: grammar checks, session alignment, collecting choices."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.requests import Request

from ...engine.client import EventStream, merge
from ...engine.request import ConstraintPlan
from ...errors import EngineError, LlamayError
from ...runtime import LoadedModel
from ...types import ErrorEvent, FinishEvent, TokenEvent
from ..sessions import align_prompt, reserve_session
from .schemas import Common

__all__ = ["Choice", "check_plan", "collect", "session_tokens"]

Choice = tuple[str, FinishEvent, list[TokenEvent] | None]


async def check_plan(lm: LoadedModel, plan: ConstraintPlan | None) -> None:
    """Compile a request's grammar for this model's vocabulary before anything is queued,
    so a grammar llguidance refuses is a 400, not a failed generation. Off the event loop:
    the first compile also builds the model's llguidance tokenizer."""
    if plan is not None and plan.grammar is not None:
        grammar, model = plan.grammar, lm.model
        await asyncio.to_thread(lambda: model.compile_cache.get(grammar))


@asynccontextmanager
async def session_tokens(
    request: Request, lm: LoadedModel, common: Common, tokens: list[int], text: str | None
) -> AsyncIterator[list[int]]:
    """The prompt tokens to submit: as given, or aligned with the session's context (which
    stays reserved for the request if the body of the `with` submits it)."""
    if common.session is None:
        yield tokens
        return
    async with reserve_session(request, lm, common.session) as held:
        yield align_prompt(lm, held, tokens, text)


async def collect(streams: list[EventStream], want_logprobs: bool) -> list[Choice]:
    """Run every choice to its end; an engine error becomes EngineError."""
    texts = [""] * len(streams)
    events: list[list[TokenEvent]] = [[] for _ in streams]
    finishes: list[FinishEvent | None] = [None] * len(streams)
    async for i, ev in merge(streams):
        if isinstance(ev, TokenEvent):
            texts[i] += ev.text
            if want_logprobs:
                events[i].append(ev)
        elif isinstance(ev, FinishEvent):
            texts[i] += ev.text
            finishes[i] = ev
        elif isinstance(ev, ErrorEvent):
            if isinstance(ev.error, LlamayError):
                raise ev.error
            raise EngineError(f"generation failed: {ev.error}")
    out: list[Choice] = []
    for i, fin in enumerate(finishes):
        if fin is None:  # pragma: no cover - merge only ends after every finish
            raise EngineError("generation ended without a finish event")
        out.append((texts[i], fin, events[i] if want_logprobs else None))
    return out
