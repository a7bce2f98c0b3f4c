"""The in-process backend: a Runtime holding one model, driven through the chat pipeline
(a `Job` -> `prepare` -> `run` -> a renderer) and the context service
(`llamay.chat.contexts`), exactly as the HTTP routes drive them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from ..chat.contexts import ContextService
from ..chat.flow import ChatOptions, Piece
from ..chat.pipeline import (
    Choice,
    Delta,
    Done,
    Frames,
    Generation,
    Prepared,
    Prompt,
    RunSpec,
    answer,
    run,
    run_spec,
    start,
    start_batch,
)
from ..chat.prepare import (
    ChatInput,
    Input,
    Job,
    Knobs,
    ModelRef,
    TextInput,
    model_params,
    prepare,
)
from ..chat.tools import ToolChoice
from ..errors import Conflict, EngineError, InvalidRequest, LlamayError
from ..runtime import LoadedModel, Runtime, RuntimeConfig, load_model
from ..types import SamplingParams
from .backend import ContextHandle, Reply
from .options import Ask, Options
from .results import Chunk, ScoreResult, Timings, ToolCall, Usage

__all__ = ["LocalBackend", "LocalConfig"]


@dataclass(frozen=True)
class LocalConfig:
    """How to load the model: see `LLM` for each field."""

    ctx: int = 0
    threads: int = 0
    concurrency: int = 8
    batch: int = 512
    kv: str = "f16"
    max_tokens: int = 2048
    chat_template: Path | None = None
    progress: Callable[[float], object] | None = None


class LocalBackend:
    """One loaded model and its engine thread; build with `await LocalBackend.open(...)`.
    Contexts live in the engine as they do in a server's, spilled (if KV runs short) to a
    private folder that `aclose` removes: a library leaves nothing behind."""

    def __init__(self, runtime: Runtime, lm: LoadedModel, folder: Path) -> None:
        self.runtime = runtime
        self.lm = lm
        self.name = lm.name
        self.contexts = ContextService(runtime)
        self._folder = folder
        self._open: set[str] = set()  # contexts made here and not closed yet

    @classmethod
    async def open(cls, model: str | None, config: LocalConfig) -> LocalBackend:
        """Resolve `model` (a name, "" or None for the default, or a .gguf path; fetched on
        first use) and load it."""
        from ..store import ModelStore

        store = ModelStore()
        found = await asyncio.to_thread(store.resolve, model or None)
        folder = Path(tempfile.mkdtemp(prefix="llamay-library-"))
        rc = RuntimeConfig(
            ctx=config.ctx,
            batch=config.batch,
            threads=config.threads,
            concurrency=config.concurrency,
            # Room for chat_many and score batches well beyond the running cap.
            max_queue=max(64, 8 * config.concurrency),
            kv_type=config.kv,
            chat_template_file=config.chat_template,
            home=folder,
            max_tokens=config.max_tokens,
        )
        try:
            lm = await asyncio.to_thread(
                load_model, found.name, found.path, rc, found.sha256, config.progress
            )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        runtime = Runtime(rc, store=store, max_loaded=1, keep_alive=-1.0)
        runtime.add(lm, default=True, keep_alive=-1.0)
        return cls(runtime, lm, folder)

    # -- generation ------------------------------------------------------------------------
    @staticmethod
    def _knobs(opts: Options) -> Knobs:
        given = opts.sampling_given()
        return Knobs(SamplingParams(**given), frozenset(given), max_tokens=opts.max_tokens, stop=opts.stop)

    def _spec(self, opts: Options) -> RunSpec:
        """What a call with `opts` runs with (the model's defaults under them)."""
        params = model_params(self.runtime, self.lm)
        return run_spec(self._knobs(opts).under(params), self.lm.engine.n_ctx, self.runtime.config.max_tokens)

    @staticmethod
    def _input(ask: Ask) -> ChatInput:
        thinking = ask.opts.thinking
        choice = ask.tool_choice
        tool_choice = ToolChoice("function", choice)
        if choice in ("auto", "none", "required"):
            tool_choice = ToolChoice(choice)  # type: ignore[arg-type]
        chat = ChatOptions(
            messages=ask.messages,
            tools=ask.tools if choice != "none" else [],
            tool_choice=tool_choice if ask.tools else ToolChoice("none"),
            grammar=ask.output.grammar if ask.output is not None else None,
            thinking=thinking is not False,
            thinking_budget=thinking
            if isinstance(thinking, int) and not isinstance(thinking, bool)
            else None,
        )
        return ChatInput(chat)

    async def _prepare(self, inputs: Sequence[Input], opts: Options) -> Prepared:
        """One spec for all: chat_many gives every prompt the same options."""
        return await prepare(self.runtime, Job(ModelRef(), tuple(inputs), self._knobs(opts)))

    async def _start(self, ask: Ask) -> Generation:
        """Submit one round: on its context when it has one. A prompt that no longer extends
        what the context holds (a template that rewrites history) runs without it, and the
        context is marked stale so the conversation computes a new one."""
        ready = await self._prepare([self._input(ask)], ask.opts)
        handle = ask.session
        if isinstance(handle, ContextHandle) and handle.id is not None and not handle.stale:
            try:
                async with self.contexts.reserve(self.lm, handle.id) as held:
                    return run(ready, held=held)
            except Conflict:
                handle.stale = True
        return run(ready)

    async def generate(self, ask: Ask) -> AsyncIterator[Chunk | Reply]:
        t0 = time.perf_counter()
        frames = Frames(await self._start(ask), ReplyRenderer(t0, streaming=True))
        try:
            async for item in frames:
                yield item
        finally:
            await frames.aclose()  # an early exit aborts the request now, freeing its KV

    async def generate_many(self, asks: list[Ask]) -> list[Reply]:
        t0 = time.perf_counter()
        ready = await self._prepare([self._input(a) for a in asks], asks[0].opts)
        return await answer(run(ready), ReplyRenderer(t0, streaming=False))

    async def complete(self, prompts: list[str], opts: Options) -> list[Reply]:
        t0 = time.perf_counter()
        grammar = opts.output.grammar if opts.output is not None else None
        # As /v1/completions reads a prompt: special-token names are plain text.
        ready = await self._prepare([TextInput(p, grammar, special=False) for p in prompts], opts)
        return await answer(run(ready), ReplyRenderer(t0, streaming=False))

    async def score(self, prompt: str, continuations: list[str]) -> list[ScoreResult]:
        model = self.lm.model
        head = model.tokenize(prompt, add_special=True, parse_special=False)
        if not head:
            raise InvalidRequest("the prompt has no tokens", param="prompt")
        tails = [model.tokenize(c, add_special=False, parse_special=False) for c in continuations]
        for c, tail in zip(continuations, tails, strict=True):
            if not tail:
                raise InvalidRequest(f"continuation {c!r} has no tokens", param="continuations")
        # The prompt is computed once and kept in the prefix cache; then every continuation,
        # in one batch, shares its KV and scores only its own tokens (each with its best
        # alternative, to tell whether it is the greedy one).
        read = RunSpec(SamplingParams(temperature=0.0), max_tokens=0)
        await (await start(self.lm, Prompt(head), read)).collect()
        spec = replace(read, prompt_logprobs=1, score_from=len(head))
        gen = await start_batch(self.lm, [Prompt(head + t) for t in tails], spec)
        out = []
        for text, tail, choice in zip(continuations, tails, await gen.collect(), strict=True):
            scores = choice.finish.prompt_logprobs
            if scores is None:
                raise EngineError("the continuation could not be scored (the KV cache is full?)")
            mine = scores  # entry i scores token i of the continuation
            if len(mine) != len(tail):
                raise EngineError("the engine scored a different number of tokens than it was given")
            lps = [s.logprob for s in mine]
            greedy = all(s.token == s.top[0].token or s.logprob >= s.top[0].logprob for s in mine)
            tokens = [s.text.decode("utf-8", errors="replace") for s in mine]
            out.append(ScoreResult(text, tokens, lps, sum(lps), greedy))
        return out

    # -- contexts --------------------------------------------------------------------------
    async def open_context(self, messages: list[dict[str, Any]]) -> ContextHandle:
        """A context holding `messages` rendered as the server renders them for
        POST /v1/contexts (no generation prompt), computed now."""
        lm = self.lm
        text = lm.template.render(messages, add_generation_prompt=False)
        text = lm.template.strip_bos_eos(text, add_bos=lm.model.add_bos)
        tokens = lm.model.tokenize(text, add_special=True, parse_special=True)
        cid = await self.contexts.create(lm, tokens)
        self._open.add(cid)
        return ContextHandle(cid)

    async def fork_context(self, handle: ContextHandle, messages: list[dict[str, Any]]) -> ContextHandle:
        if handle.id is None or handle.stale:
            return await self.open_context(messages)
        _, (rec,) = await self.contexts.fork(handle.id, 1)
        self._open.add(rec.id)
        return ContextHandle(rec.id)

    async def close_context(self, handle: ContextHandle) -> None:
        if handle.id is not None:
            cid, handle.id = handle.id, None
            self._open.discard(cid)
            await self.contexts.delete(cid)

    async def stats(self) -> dict[str, Any]:
        st = self.lm.engine.stats
        return {
            "name": self.name,
            "requests": st.requests,
            "aborted": st.aborted,
            "prompt_tokens": st.prompt_tokens,
            "cached_tokens": st.cached_tokens,
            "generated_tokens": st.generated_tokens,
            "decode_steps": st.steps,
            "decode_seconds": st.decode_seconds,
        }

    async def aclose(self) -> None:
        for cid in list(self._open):  # contexts still open: nothing to save
            # One busy or vanished context must not keep the engine running.
            with contextlib.suppress(Exception):
                await self.contexts.delete(cid)
        self._open.clear()
        await asyncio.to_thread(self.runtime.close)
        shutil.rmtree(self._folder, ignore_errors=True)


class ReplyRenderer:
    """The pipeline's steps as the library's results (see chat/pipeline.py): streamed,
    text chunks then the round's Reply; whole, the Replies of every choice in order. A
    failure is raised, not rendered."""

    def __init__(self, t0: float, *, streaming: bool) -> None:
        self.t0 = t0
        self.streaming = streaming
        self.n = 1
        self.choices: dict[int, Choice] = {}

    def start(self, gen: Generation) -> Sequence[Any]:
        self.n = len(gen.streams)
        return ()

    def delta(self, step: Delta) -> Sequence[Any]:
        return _chunks(step.pieces) if self.streaming else ()

    def done(self, step: Done) -> Sequence[Any]:
        if self.streaming:
            return [*_chunks(step.pieces), _reply(step.choice, self.t0)]
        self.choices[step.choice.index] = step.choice
        if len(self.choices) < self.n:
            return ()
        return [[_reply(self.choices[i], self.t0) for i in range(self.n)]]

    def error(self, exc: LlamayError) -> NoReturn:
        raise exc


def _chunks(pieces: list[Piece]) -> list[Chunk]:
    return [c for c in map(_chunk, pieces) if c is not None]


def _chunk(piece: Piece) -> Chunk | None:
    """Text pieces stream; tool calls come whole with the reply (their arguments are only
    worth running once complete)."""
    if piece.kind == "content" and piece.text:
        return Chunk(piece.text)
    if piece.kind == "reasoning" and piece.text:
        return Chunk(reasoning=piece.text, kind="reasoning")
    return None


def _reply(choice: Choice, t0: float) -> Reply:
    fin = choice.finish
    x = fin.extra
    calls = [ToolCall(c.id, c.name, _arguments(c.arguments)) for c in choice.calls]
    return Reply(
        content=choice.content,
        reasoning=choice.reasoning,
        calls=calls,
        raw_arguments=[c.arguments for c in choice.calls],
        finish_reason="tool_calls" if calls and fin.reason == "stop" else fin.reason,
        usage=Usage(fin.usage.prompt_tokens, fin.usage.completion_tokens, fin.usage.cached_tokens),
        timings=Timings(
            prompt_ms=float(x.get("prompt_ms", 0.0)),
            generate_ms=float(x.get("generate_ms", 0.0)),
            queue_ms=float(x.get("queue_ms", 0.0)),
            total_ms=(time.perf_counter() - t0) * 1000.0,
        ),
        finish_message=fin.message,
    )


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
