"""The one chat pipeline: every front end (the OpenAI, Anthropic and Ollama routes,
`llamay run`, the Python library) parses its request into a `Job`, then `prepare`
(chat/prepare.py) -> `run` -> a `Generation`, which the driver here feeds to that front
end's `Renderer` for a streamed or a whole answer.

`run` submits a prepared job's prompts to the model's engine, `n` choices each, all or
none: a session's prompt aligned with what its context holds, `max_tokens` clamped to
the room the context leaves (`flow.output_limit`). A `Generation` then yields typed steps
(`Delta`, `Done`) or collects whole `Choice`s; an engine failure is raised as one error
type (`LlamayError`). `start` / `start_batch` do the same for a `Prompt` built by hand
(compiling its constraint first).

A renderer is a plain object with four methods, each returning the frames (SSE or NDJSON
bytes, the library's chunks, ...) that one moment makes: `start(gen)` (the generation was
submitted; its number of choices is known), `delta(step)` (one token made something
visible in one choice), `done(step)` (one choice ended; after the last one, whatever
closes the answer too) and `error(exc)` (the generation failed after the answer began).
A renderer built for a whole answer returns no frames until the last `done`, which
returns exactly one: the body. `Frames` streams; `answer` returns the body. Both close
the generation however they end (which aborts its engine requests and frees their KV).
Nothing here knows an HTTP shape.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..auth import CURRENT_NAMESPACE, CURRENT_PRINCIPAL
from ..engine.client import EventStream, merge, submit_all
from ..engine.request import ConstraintPlan, GenerateRequest, SessionSpec
from ..errors import EngineError, InternalError, InvalidRequest, LlamayError
from ..grammar.report import check
from ..kv.pool import SHARED
from ..types import ErrorEvent, FinishEvent, SamplingParams, StopSpec, TokenEvent, Usage
from .flow import ChatSetup, Piece, check_room, output_limit, wanted_limit
from .journal import JOURNAL, record
from .prepare import Knobs, Prepared, Prompt, align_prompt, chat_prompt, sampling_defaults, text_prompt
from .tools import ToolCall

if TYPE_CHECKING:
    from ..runtime import LoadedModel

__all__ = [
    "Prompt",
    "RunSpec",
    "run_spec",
    "Prepared",
    "Held",
    "NewContext",
    "Choice",
    "Delta",
    "Done",
    "Generation",
    "chat_prompt",
    "text_prompt",
    "run",
    "start",
    "start_batch",
    "align_prompt",
    "compile_plan",
    "check_room",
    "engine_failure",
    "sampling_defaults",
    "Renderer",
    "Frames",
    "answer",
]

F = TypeVar("F")
F_co = TypeVar("F_co", covariant=True)
log = logging.getLogger("llamay.chat")
Settle = Callable[["Choice"], Awaitable[None]]


@dataclass(frozen=True)
class RunSpec:
    """How to generate, whatever API asked. `keep_tokens`: keep each choice's token
    events (for log-probs). `prompt_logprobs`: score the prompt's own tokens with that many
    alternatives, from prompt token `score_from` on (the tokens before it may share a
    cached prefix). `default_max`: the server's default output budget, for a request
    that sets no limit.
    `namespace`: the prefix-cache namespace (None: the current request's, set from its
    principal by the HTTP edge; "" outside a server)."""

    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    repetition: Any = None
    cache_prompt: bool = True
    keep_tokens: bool = False
    prompt_logprobs: int | None = None
    score_from: int = 1
    default_max: int = 2048
    namespace: str | None = None


def run_spec(knobs: Knobs, n_ctx: int, default_max: int) -> RunSpec:
    """How to run `knobs` on a model whose context holds `n_ctx` tokens, `default_max`
    being the server's limit for constrained output that sets none."""
    sampling = knobs.sampling
    if knobs.whole_context_repeat:
        sampling = replace(sampling, repeat_last_n=n_ctx)
    return RunSpec(
        sampling=sampling,
        max_tokens=knobs.max_tokens,
        stop=knobs.stop,
        n=knobs.n,
        repetition=knobs.repetition,
        cache_prompt=knobs.cache_prompt,
        keep_tokens=knobs.keep_tokens,
        prompt_logprobs=knobs.prompt_logprobs,
        default_max=default_max,
    )


@dataclass(frozen=True)
class Held:
    """A reserved server-held context: its id and the tokens it holds."""

    context_id: str
    tokens: list[int]


@dataclass(frozen=True)
class NewContext:
    """Keep the prompt as a new server-held context (usually with max_tokens 0); the
    finish event's `extra["context_id"]` names it. `shared` (an admin's choice): its KV is
    in the SHARED namespace, a prefix every tenant's requests may attach to; it is then
    computed from shared prefixes only."""

    owner: str | None = None
    marking: str | None = None
    shared: bool = False


@dataclass
class Choice:
    """One finished choice: the raw `text`, split into `content`, `reasoning` and tool
    `calls`; its finish event; its token events when kept; and `check`, the report on a
    schema the constraint could not enforce in full (None otherwise)."""

    index: int
    text: str
    content: str
    reasoning: str
    calls: list[ToolCall]
    finish: FinishEvent
    tokens: list[TokenEvent] | None = None
    check: dict[str, Any] | None = None

    @property
    def reason(self) -> str:
        return self.finish.reason

    @property
    def usage(self) -> Usage:
        return self.finish.usage


@dataclass(frozen=True)
class Delta:
    """What one token made visible in choice `index` (`pieces` may be empty while text is
    held back); `token` is the engine's event, for log-probs."""

    index: int
    pieces: list[Piece]
    token: TokenEvent | None = None


@dataclass(frozen=True)
class Done:
    """Choice `choice.index` ended; `pieces` are what its end released."""

    choice: Choice
    pieces: list[Piece]


class _Split:
    """One choice's text so far, split as it streams (all content for a plain prompt)."""

    def __init__(self, setup: ChatSetup | None) -> None:
        self.out = setup.output() if setup is not None else None
        self.text = ""
        self.plain = ""
        # Tokens generated before the answer's first piece: the reasoning's, when there is any.
        self.before_answer = 0
        self.answered = False

    def push(self, text: str) -> list[Piece]:
        self.text += text
        if self.out is None:
            self.plain += text
            return [Piece("content", text)] if text else []
        return self.out.push(text)

    def token(self, pieces: list[Piece]) -> list[Piece]:
        """Count one generated token whose text gave `pieces`."""
        if not self.answered:
            if any(p.kind != "reasoning" for p in pieces):
                self.answered = True
            else:
                self.before_answer += 1
        return pieces

    def reasoning_tokens(self, completion_tokens: int) -> int:
        """The tokens spent thinking: every one before the answer began, when there was
        reasoning (its close marker and the whitespace after it included)."""
        if self.out is None or not self.out.reasoning:
            return 0
        return min(self.before_answer, completion_tokens)

    def finish(self) -> list[Piece]:
        return self.out.finish() if self.out is not None else []

    def content(self) -> str:
        return self.out.content if self.out is not None else self.plain


class Generation:
    """The choices of submitted prompts (`n` each). Iterate for `Delta`/`Done` steps in arrival
    order, or `collect()`; each choice's engine request is aborted when the iteration
    ends early or `close()` is called. An engine failure raises LlamayError."""

    def __init__(self, prompts: list[Prompt], spec: RunSpec, streams: list[EventStream]) -> None:
        self.prompts = prompts
        self.spec = spec
        self.streams = streams
        # Choice i is choice i % n of prompt i // n.
        self._splits = [_Split(prompts[i // spec.n].setup) for i in range(len(streams))]
        self._kept: list[list[TokenEvent]] = [[] for _ in streams]
        # Taken where the request submitted it: its answer waits for the journal (journal.py).
        self._journal = JOURNAL.get()

    @property
    def prompt(self) -> Prompt:
        """The (first) prompt, as submitted (a session's prompt aligned with its context)."""
        return self.prompts[0]

    def __aiter__(self) -> AsyncIterator[Delta | Done]:
        return self._steps()

    async def _steps(self) -> AsyncIterator[Delta | Done]:
        # A consumer that stops early closes this generator only when it is collected;
        # consumers call close() in a finally, so the engine frees the KV at once.
        async for i, ev in merge(self.streams):
            split = self._splits[i]
            if isinstance(ev, TokenEvent):
                if self.spec.keep_tokens:
                    self._kept[i].append(ev)
                yield Delta(i, split.token(split.push(ev.text)), ev)
            elif isinstance(ev, FinishEvent):
                cid = ev.extra.get("context_id")
                if isinstance(cid, str):  # a session turn or a new context: durable first
                    await record(cid, journal=self._journal)
                pieces = split.push(ev.text) + split.finish()
                yield Done(await self._choice(i, ev), pieces)
            elif isinstance(ev, ErrorEvent):
                raise engine_failure(ev.error)

    async def collect(self) -> list[Choice]:
        """Run every choice to its end, in index order."""
        done: dict[int, Choice] = {}
        try:
            async for step in self:
                if isinstance(step, Done):
                    done[step.choice.index] = step.choice
        finally:
            self.close()
        if len(done) != len(self.streams):  # pragma: no cover - merge ends after every finish
            raise EngineError("generation ended without a finish event")
        return [done[i] for i in range(len(self.streams))]

    def calls(self, index: int) -> list[ToolCall]:
        """The tool calls choice `index` has made so far (whole ones, and one in progress)."""
        out = self._splits[index].out
        return out.calls if out is not None else []

    def close(self) -> None:
        for s in self.streams:
            s.close()

    async def _choice(self, i: int, fin: FinishEvent) -> Choice:
        split = self._splits[i]
        out = split.out
        content = split.content()
        grammar = self.prompts[i // self.spec.n].grammar
        report = None
        if grammar is not None and grammar.schema is not None and grammar.unenforced:
            report = await asyncio.to_thread(check, grammar, content, complete=fin.reason == "stop")
        usage = replace(fin.usage, reasoning_tokens=split.reasoning_tokens(fin.usage.completion_tokens))
        return Choice(
            index=i,
            text=split.text,
            content=content,
            reasoning=out.reasoning if out is not None else "",
            calls=out.calls if out is not None else [],
            finish=replace(fin, usage=usage),
            tokens=self._kept[i] if self.spec.keep_tokens else None,
            check=report,
        )


def engine_failure(error: Exception) -> LlamayError:
    """An engine error event as the pipeline's one error type."""
    return error if isinstance(error, LlamayError) else EngineError(f"generation failed: {error}")


async def compile_plan(lm: LoadedModel, plan: ConstraintPlan | None) -> None:
    """Compile a plan's grammar for this model's vocabulary before anything is queued, so
    a grammar llguidance refuses is a 400, not a failed generation. Off the event loop:
    the first compile also builds the model's llguidance tokenizer."""
    if plan is not None and plan.grammar is not None:
        grammar, model = plan.grammar, lm.model
        await asyncio.to_thread(lambda: model.compile_cache.get(grammar))


def run(ready: Prepared, *, held: Held | None = None, new_context: NewContext | None = None) -> Generation:
    """Submit a prepared job: `n` choices of every prompt, all or none. With `held` (one
    prompt only), the prompt must start with what that reserved context holds (409 if it
    diverges) and the context holds prompt + reply afterwards. With `new_context`, the
    prompt becomes a new context."""
    lm, prompts = ready.lm, ready.prompts
    spec = run_spec(ready.knobs, lm.engine.n_ctx, ready.default_max)
    if held is not None:
        if len(prompts) != 1:
            raise InvalidRequest("a session takes one prompt per request", param="prompt")
        (prompt,) = prompts
        prompts = [replace(prompt, tokens=align_prompt(lm, held.tokens, prompt.tokens, prompt.text))]
    return _submit(lm, prompts, spec, held, new_context)


async def start(
    lm: LoadedModel,
    prompt: Prompt,
    spec: RunSpec,
    *,
    held: Held | None = None,
    new_context: NewContext | None = None,
) -> Generation:
    """`run` for a prompt built by hand: its constraint compiled first (see compile_plan)."""
    if held is not None:
        prompt = replace(prompt, tokens=align_prompt(lm, held.tokens, prompt.tokens, prompt.text))
    return await start_batch(lm, [prompt], spec, held=held, new_context=new_context)


async def start_batch(
    lm: LoadedModel,
    prompts: list[Prompt],
    spec: RunSpec,
    *,
    held: Held | None = None,
    new_context: NewContext | None = None,
) -> Generation:
    """Submit `spec.n` choices of every prompt at once (they share decode steps), all or
    none, their constraints compiled first."""
    for prompt in prompts:
        await compile_plan(lm, prompt.plan)
        await asyncio.to_thread(check_room, lm, prompt.plan, len(prompt.tokens), spec.max_tokens, spec.default_max)
    return _submit(lm, prompts, spec, held, new_context)


def _submit(
    lm: LoadedModel,
    prompts: list[Prompt],
    spec: RunSpec,
    held: Held | None,
    new_context: NewContext | None,
) -> Generation:
    """More than the engine's queue holds is a 400, since no retry could cure it."""
    session = None
    if held is not None:
        session = SessionSpec(context_id=held.context_id)
    elif new_context is not None:
        session = SessionSpec(create=True, owner=new_context.owner, marking=new_context.marking)
    namespace = spec.namespace if spec.namespace is not None else CURRENT_NAMESPACE.get()
    if new_context is not None and new_context.shared:
        namespace = SHARED
    spec = replace(spec, namespace=namespace)
    requests = [r for p in prompts for r in requests_for(lm, p.tokens, p.plan, spec, session)]
    cap = lm.engine.config.max_queue
    if len(requests) > cap:
        raise InvalidRequest(f"at most {cap} prompts times 'n' fit in one request", param="prompt")
    return Generation(prompts, spec, submit_all(lm.engine, requests))


def requests_for(
    lm: LoadedModel,
    tokens: list[int],
    plan: ConstraintPlan | None,
    spec: RunSpec,
    session: SessionSpec | None = None,
) -> list[GenerateRequest]:
    """One engine request per choice. With a seed, choice i uses seed + i so that n > 1
    gives different texts that are still reproducible."""
    n_ctx = lm.engine.n_ctx
    wanted = wanted_limit(plan, spec.max_tokens, spec.default_max)
    max_tokens = output_limit(plan, spec.max_tokens, spec.default_max, n_ctx - len(tokens))
    stop = StopSpec(max_tokens=max_tokens, stop=spec.stop, asked=wanted if wanted > max_tokens else None)
    out = []
    for i in range(spec.n):
        sampling = spec.sampling
        if sampling.seed is not None and i:
            sampling = replace(sampling, seed=sampling.seed + i)
        out.append(
            GenerateRequest(
                tokens=list(tokens),
                sampling=sampling,
                stop=stop,
                constraint=plan,
                session=session,
                repetition=spec.repetition,
                cache=spec.cache_prompt,
                prompt_logprobs=spec.prompt_logprobs,
                score_from=spec.score_from,
                namespace=spec.namespace or "",
                tenant=CURRENT_PRINCIPAL.get().tenant,
                weight=CURRENT_PRINCIPAL.get().weight,
            )
        )
    return out


class Renderer(Protocol[F_co]):
    """A front end's answer, made from the pipeline's steps (see the module's docstring)."""

    def start(self, gen: Generation) -> Sequence[F_co]: ...

    def delta(self, step: Delta) -> Sequence[F_co]: ...

    def done(self, step: Done) -> Sequence[F_co]: ...

    def error(self, exc: LlamayError) -> Sequence[F_co]: ...


class Frames(Generic[F]):
    """The frames of a streamed answer: the renderer's start, its frames for each step,
    and on a failure its error frames (an unexpected exception is logged and reported as
    an internal error). `settle` is awaited after each choice's `done` and before its
    frames go out (to store what the answer made first); `cleanup` runs when the stream
    ends. Closing it, even before its first frame, closes the generation."""

    def __init__(
        self,
        gen: Generation,
        renderer: Renderer[F],
        *,
        settle: Settle | None = None,
        cleanup: Callable[[], None] | None = None,
    ) -> None:
        self._gen = gen
        self._cleanup = cleanup
        self._closed = False
        self._it = self._frames(renderer, settle)

    def __aiter__(self) -> AsyncIterator[F]:
        # The generator itself: iterating costs nothing of ours per frame. (Once only.)
        return self._it

    async def aclose(self) -> None:
        try:
            await self._it.aclose()
        finally:
            self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._gen.close()
        if self._cleanup is not None:
            self._cleanup()

    async def _frames(self, r: Renderer[F], settle: Settle | None) -> AsyncGenerator[F, None]:
        gen = self._gen
        try:
            for frame in r.start(gen):
                yield frame
            async for step in gen:
                if isinstance(step, Delta):
                    for frame in r.delta(step):
                        yield frame
                    continue
                frames = r.done(step)
                if settle is not None:
                    await settle(step.choice)
                for frame in frames:
                    yield frame
        except LlamayError as exc:
            for frame in r.error(exc):
                yield frame
        except Exception as exc:
            log.exception("a streamed answer failed")
            for frame in r.error(InternalError.of(exc)):
                yield frame
        finally:
            self._close()


async def answer(gen: Generation, r: Renderer[F], *, settle: Settle | None = None) -> F:
    """The whole answer: every step through `r` (built for a whole answer), then the one
    frame its last `done` returned. A failure is raised (LlamayError)."""
    last: Sequence[F] = ()
    try:
        r.start(gen)
        async for step in gen:
            if isinstance(step, Delta):
                r.delta(step)
                continue
            last = r.done(step)
            if settle is not None:
                await settle(step.choice)
    finally:
        gen.close()
    if len(last) != 1:  # pragma: no cover - merge ends after every finish
        raise EngineError("generation ended without a finish event")
    return last[0]
