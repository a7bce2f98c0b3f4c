"""The pipeline's request and `prepare`, which makes it ready to run, in one place for
every front end.

A front end parses its API's fields into a `Job`: the model (`ModelRef`), the prompts to
answer (`Input`s: chat messages, plain text or token ids, fill-in-the-middle) and how to
sample and stop (`Knobs`, as the request set them). `prepare` finds the model on the event
loop (`lookup`: loaded on demand), then does the rest in one worker hop, in order: the
defaults chain (the model's parameters, which are its GGUF's `general.sampling.*`, then
the server's flags, then what `create` set, all under what the request set:
`Knobs.under`), the vocabulary check of the sampling knobs, the server's finish-tool
default, each prompt's render and tokenization, and each constraint's compile for the
model's vocabulary (a grammar llguidance refuses is a 400 before anything is queued). The
output budget is the `RunSpec`'s, which the pipeline's `run` makes of the knobs: the request's `max_tokens`, else for constrained output the schema's own
bound or the server's `-max-tokens`, clamped to the room the context leaves. No route
does any of this itself.

Nothing here knows an HTTP shape, and nothing here imports the engine: parsers import the
records without it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..auth import CURRENT_PRINCIPAL
from ..engine.request import ConstraintPlan
from ..engine.scheduler import common_prefix
from ..errors import Conflict, InvalidRequest, LlamayError, ModelNotFound
from ..grammar import Grammar
from ..store import gguf_sampling_defaults
from ..types import DEFAULTABLE, SamplingParams
from .fim import fim_tokens
from .flow import ChatOptions, ChatSetup, check_room, prepare_chat, with_finish_default
from .template import ChatTemplate

if TYPE_CHECKING:
    from ..runtime import LoadedModel

__all__ = [
    "ModelRef",
    "Knobs",
    "Env",
    "Input",
    "ChatInput",
    "Marked",
    "TextInput",
    "FimInput",
    "Job",
    "Prompt",
    "chat_prompt",
    "text_prompt",
    "align_prompt",
    "Prepared",
    "SERVER_SAMPLING",
    "store_call",
    "server_defaults",
    "effective_params",
    "model_params",
    "sampling_defaults",
    "loaded_alias",
    "lookup",
    "prepare",
    "count_tokens",
]

# -- the request ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRef:
    """Which model: `name` ("" the default), kept loaded `keep_alive` seconds from now
    (None: the server's default). `fallback`: the model to use when `name` names none (an
    Anthropic client's "claude-..." runs on the default). `loose_tag`: "x:latest" also
    names a model loaded as "x" (Ollama clients add the default tag)."""

    name: str = ""
    keep_alive: float | None = None
    fallback: str | None = None
    loose_tag: bool = False


@dataclass(frozen=True)
class Knobs:
    """How to sample and when to stop, as the request set them. `given`: the sampling
    fields the request set itself; every other one takes the model's default (`under`).
    `keep_tokens`: keep each choice's token events (for log-probs); `prompt_logprobs`:
    score the prompt's own tokens with that many alternatives. `whole_context_repeat`: the
    repetition window is the whole context (Ollama's repeat_last_n -1)."""

    sampling: SamplingParams = field(default_factory=SamplingParams)
    given: frozenset[str] = frozenset()
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    repetition: Any = None
    cache_prompt: bool = True
    keep_tokens: bool = False
    prompt_logprobs: int | None = None
    whole_context_repeat: bool = False

    def under(self, params: Mapping[str, Any]) -> Knobs:
        """These knobs over a model's parameters (option name -> value: `effective_params`):
        each sampling field the request did not set takes the model's value.
        InvalidRequest when a value is out of range."""
        return replace(self, sampling=self.sampling.with_defaults(params, self.given))


@dataclass(frozen=True)
class Env:
    """What `prepare` knows besides the model: the server's finish-tool mode and the
    model's own system prompt (what `create` set; looked up only for inputs that want it)."""

    finish_tool: str = "off"
    system: str | None = None


@dataclass
class Prompt:
    """What to generate from: the tokens, their text (None when built from tokens), the
    chat setup that splits the reply (None: plain text, all content), the constraint plan
    and the caller's grammar (to check what the plan could not enforce). `mark`: how many
    of the tokens come before a place the caller marked in the conversation (a cache
    breakpoint; 0 without one)."""

    tokens: list[int]
    text: str | None = None
    setup: ChatSetup | None = None
    plan: ConstraintPlan | None = None
    grammar: Grammar | None = None
    mark: int = 0


def _plan(grammar: Grammar | None) -> ConstraintPlan | None:
    return ConstraintPlan(grammar, label="json") if grammar is not None else None


def chat_prompt(lm: LoadedModel, opts: ChatOptions, prefill: str = "") -> Prompt:
    """Messages rendered through the model's template; `prefill` is text the reply continues."""
    setup = prepare_chat(lm, opts)
    if prefill:
        setup.text += prefill
        setup.tokens = lm.model.tokenize(setup.text, add_special=True, parse_special=True)
    return Prompt(setup.tokens, setup.text, setup, setup.plan, opts.grammar)


def text_prompt(
    lm: LoadedModel,
    text: str | Sequence[int],
    grammar: Grammar | None = None,
    *,
    prefix: Sequence[int] = (),
    special: bool = True,
) -> Prompt:
    """Plain text, no template: special tokens written in it are parsed unless `special`
    is False. Token ids are taken as they are (each checked against the vocabulary).
    After `prefix` (tokens of an earlier turn, checked too) the text gets no BOS of its own."""
    head = list(prefix)
    if head:
        lm.model.check_tokens(head)
    if isinstance(text, str):
        tokens = head + lm.model.tokenize(text, add_special=not head, parse_special=special)
    else:
        given = list(text)
        lm.model.check_tokens(given)
        tokens = head + given
    shown = text if isinstance(text, str) and not head else None
    return Prompt(tokens, shown, None, _plan(grammar), grammar)


def align_prompt(lm: LoadedModel, held: list[int], tokens: list[int], text: str | None) -> list[int]:
    """The prompt as tokens that start with exactly `held`. A prompt whose text starts with
    the held text but tokenizes differently at the seam keeps the held tokens and
    tokenizes only the rest; a prompt that really differs is a 409 saying where."""
    if tokens[: len(held)] == held and len(tokens) > len(held):
        return tokens
    if text is not None:
        held_text = lm.model.detokenize(held)
        if text.startswith(held_text) and len(text) > len(held_text):
            return held + lm.model.tokenize(text[len(held_text) :], add_special=False, parse_special=True)
    at = next(
        (i for i, (a, b) in enumerate(zip(held, tokens, strict=False)) if a != b), min(len(held), len(tokens))
    )
    if at >= len(held):
        raise InvalidRequest("the prompt adds nothing to what the context holds", param="llamay_session")
    shown = lm.model.detokenize(held[max(0, at - 8) : at + 8])
    raise Conflict(
        f"the prompt diverges from the context at token {at} of {len(held)} (near {shown!r}); "
        "a session's prompt must start with exactly what the context holds"
    )


@dataclass(frozen=True)
class Input:
    """One prompt to answer. `prompt` renders and tokenizes it (CPU work: `prepare` calls
    it off the event loop); `wants_system`: it uses the model's own system prompt."""

    @property
    def wants_system(self) -> bool:
        return False

    def prompt(self, lm: LoadedModel, env: Env) -> Prompt:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Marked:
    """The same conversation with `marker` written at a place the caller wants the token
    offset of (Anthropic's last cache breakpoint); `prefill` as the request's."""

    options: ChatOptions
    prefill: str
    marker: str

    def offset(self, lm: LoadedModel, tokens: list[int]) -> int:
        """How many of `tokens` come before the marker: the conversation rendered with it,
        cut there, tokenized and matched (0 when the template dropped the marked part)."""
        text = chat_prompt(lm, self.options, self.prefill).text or ""
        at = text.find(self.marker)
        if at < 0:
            return 0
        return common_prefix(lm.model.tokenize(text[:at], add_special=True, parse_special=True), tokens)


@dataclass(frozen=True)
class ChatInput(Input):
    """Messages through the model's chat template. `prefill`: text the reply continues.
    `model_system`: a conversation without a system message starts with the model's own
    system prompt. `prefix`: tokens of an earlier turn the prompt follows (Ollama's
    `context`; the rendered prompt then drops its BOS). `marked`: report the offset of a
    marked place as the prompt's `mark`. `untemplated`: what a model that ships no chat
    template (and was given none by the server) gets: "chatml" the generic ChatML
    template, "raw" the user messages' text as it is (Ollama's `{{ .Prompt }}` default),
    "refuse" a 400 saying so. `template`: the request's own chat template, used instead
    of the model's."""

    options: ChatOptions
    prefill: str = ""
    model_system: bool = False
    prefix: Sequence[int] = ()
    marked: Marked | None = None
    untemplated: Literal["chatml", "raw", "refuse"] = "chatml"
    template: ChatTemplate | None = None

    @property
    def wants_system(self) -> bool:
        return self.model_system

    def prompt(self, lm: LoadedModel, env: Env) -> Prompt:
        if self.template is not None:
            # A view of the model with the request's template (its traits detected anew).
            lm = replace(lm, template=self.template, tool_template=None)
        elif lm.template.fallback and self.untemplated != "chatml":
            return self._untemplated(lm)
        opts = with_finish_default(self.options, env.finish_tool)
        if env.system and self.model_system and not any(m.get("role") == "system" for m in opts.messages):
            opts = replace(opts, messages=[{"role": "system", "content": env.system}, *opts.messages])
        prompt = chat_prompt(lm, opts, self.prefill)
        if self.prefix:
            model, head = lm.model, list(self.prefix)
            model.check_tokens(head)
            tokens = prompt.tokens
            if model.add_bos and tokens[:1] == [model.bos_id]:
                tokens = tokens[1:]
            prompt = replace(prompt, tokens=head + tokens, text=None)
        if self.marked is not None:
            prompt.mark = self.marked.offset(lm, prompt.tokens)
        return prompt

    def _untemplated(self, lm: LoadedModel) -> Prompt:
        if self.untemplated == "refuse":
            raise InvalidRequest(
                f"model '{lm.name}' has no chat template, so it cannot take messages; send the "
                "text to /v1/completions, or start the server with -chat-template FILE",
                param="messages",
            )
        opts = self.options
        if opts.tools:
            raise InvalidRequest(
                f"model '{lm.name}' has no chat template, so it cannot take tools", param="tools"
            )
        # As Ollama renders `{{ .Prompt }}`: each user turn's text, nothing around it.
        text = "".join(_text_of(m.get("content")) for m in opts.messages if m.get("role") == "user")
        return text_prompt(lm, text + self.prefill, opts.grammar, prefix=self.prefix, special=True)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


@dataclass(frozen=True)
class TextInput(Input):
    """Plain text (special tokens written in it parsed unless `special` is False) or token
    ids, no template; after `prefix` (tokens of an earlier turn) with no BOS of its own."""

    text: str | Sequence[int]
    grammar: Grammar | None = None
    special: bool = True
    prefix: Sequence[int] = ()

    def prompt(self, lm: LoadedModel, env: Env) -> Prompt:
        return text_prompt(lm, self.text, self.grammar, prefix=self.prefix, special=self.special)


@dataclass(frozen=True)
class FimInput(Input):
    """Fill in the middle: what goes between `text` (or token ids) and `suffix`."""

    text: str | Sequence[int]
    suffix: str
    grammar: Grammar | None = None

    def prompt(self, lm: LoadedModel, env: Env) -> Prompt:
        return Prompt(fim_tokens(lm, self.text, self.suffix), None, None, _plan(self.grammar), self.grammar)


@dataclass(frozen=True)
class Job:
    """A parsed request: the model, one or more prompts (`n` choices each, all submitted at
    once so they share decode steps) and the knobs."""

    model: ModelRef
    inputs: tuple[Input, ...]
    knobs: Knobs = field(default_factory=Knobs)


# -- the prepared job ----------------------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """A job ready to run: the model, each prompt rendered with its constraint compiled,
    the knobs with the model's defaults under the request's, the server's limit for
    constrained output that sets none (`default_max`; the pipeline's `run_spec` makes the
    run's spec of the two), and the nanoseconds spent loading the model (0 if it was
    loaded)."""

    lm: LoadedModel
    prompts: list[Prompt]
    knobs: Knobs
    default_max: int = 2048
    load_ns: int = 0


# -- the defaults chain --------------------------------------------------------------------

# RuntimeConfig fields set by `llamay serve -temp/-top-p/-top-k/-min-p/-repeat-penalty`.
SERVER_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty")


def store_call(runtime: Any, method: str, *args: Any) -> Any:
    """`runtime.store.<method>(*args)`, or None when there is no such method or it fails:
    for what is nice to have (a model's parameters, its system prompt), never required."""
    fn = getattr(getattr(runtime, "store", None), method, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except (LlamayError, OSError, ValueError):
        return None


def server_defaults(runtime: Any) -> dict[str, Any]:
    """The sampling defaults given to `llamay serve` (RuntimeConfig fields that are set)."""
    config = getattr(runtime, "config", None)
    values = {k: getattr(config, k, None) for k in SERVER_SAMPLING}
    return {k: v for k, v in values.items() if v is not None}


def catalog_defaults(runtime: Any, name: str) -> dict[str, Any]:
    """The sampling defaults the store's catalog gives model `name` ({} for other models)."""
    catalog = getattr(getattr(runtime, "store", None), "catalog", None)
    entry = catalog.get(name) if catalog is not None else None
    return entry.sampling_defaults if entry is not None else {}


def effective_params(runtime: Any, name: str, path: Path | None) -> dict[str, Any]:
    """A model's parameters (Ollama option names) before a request's own: the catalog's
    for a catalog model, then the GGUF's `general.sampling.*`, then the server's flags,
    then what `create` set for `name` (the store reports the GGUF's and create's together;
    a value equal to the GGUF's counts as the GGUF's). Reads the GGUF header (cached):
    call off the event loop."""
    params = store_call(runtime, "params", name)
    if not params and path is not None:
        params = store_call(runtime, "params", str(path))
    gguf = gguf_sampling_defaults(path) if path is not None else {}
    own = {k: v for k, v in (params or {}).items() if k not in gguf or gguf[k] != v}
    return {**catalog_defaults(runtime, name), **gguf, **server_defaults(runtime), **own}


# How long a loaded model's parameters are kept before they are read again: a change made
# by another process (`llamay create` in a shell) is seen this much later at most; the
# server's own store routes apply theirs at once (`Runtime.forget_params`).
PARAMS_TTL = 5.0


def model_params(runtime: Any, lm: LoadedModel) -> dict[str, Any]:
    """`effective_params` of a loaded model, kept on it for PARAMS_TTL seconds so that a
    request does not read the store (a manifest, a GGUF header) every time. Reads them when
    not kept: call off the event loop."""
    kept = lm.params_memo
    now = time.monotonic()
    if kept is None or now - kept[0] > PARAMS_TTL:
        kept = (now, effective_params(runtime, lm.name, lm.info.path))
        lm.params_memo = kept
    return kept[1]


async def sampling_defaults(runtime: Any, lm: LoadedModel) -> dict[str, Any]:
    """The sampling fields of a loaded model's parameters as its requests get them
    (`model_params`: what a request that sets none gets over its API's own defaults), read
    off the event loop when not kept."""
    params = await asyncio.to_thread(model_params, runtime, lm)
    return {k: v for k, v in params.items() if k in DEFAULTABLE}


# -- prepare -------------------------------------------------------------------------------


def loaded_alias(runtime: Any, name: str) -> str:
    """Ollama clients add the default tag: "x:latest" names a loaded "x" (a model served
    from a file has no tag) unless a model is loaded under the tagged name."""
    bare = name.removesuffix(":latest")
    if bare != name and hasattr(runtime, "loaded"):
        names = {m.name for m in runtime.loaded()}
        if name not in names and bare in names:
            return bare
    return name


async def lookup(runtime: Any, ref: ModelRef) -> tuple[LoadedModel, int]:
    """The model `ref` names, loaded if need be (`runtime.use`), and the nanoseconds that took."""
    t0 = time.perf_counter()
    name = loaded_alias(runtime, ref.name) if ref.loose_tag else ref.name
    try:
        lm: LoadedModel = await runtime.use(name, keep_alive=ref.keep_alive)
    except ModelNotFound:
        if ref.fallback is None:
            raise
        lm = await runtime.use(ref.fallback, keep_alive=ref.keep_alive)
    return lm, int((time.perf_counter() - t0) * 1e9)


async def prepare(runtime: Any, job: Job) -> Prepared:
    """`job` ready to run on the model it names (see the module's docstring)."""
    lm, load_ns = await lookup(runtime, job.model)
    # A principal whose queue is full is refused before its prompts are rendered and
    # tokenized: one that keeps re-sending a large batch costs the others almost nothing.
    lm.engine.check_queue(CURRENT_PRINCIPAL.get().tenant, len(job.inputs) * job.knobs.n)
    return await asyncio.to_thread(_prepare, runtime, lm, job, load_ns)


async def count_tokens(runtime: Any, job: Job) -> int:
    """How many tokens the job's first prompt is on the model it names (no compile)."""
    lm, _ = await lookup(runtime, job.model)
    return await asyncio.to_thread(lambda: len(job.inputs[0].prompt(lm, _env(runtime, lm, job)).tokens))


def _env(runtime: Any, lm: LoadedModel, job: Job) -> Env:
    wants = any(i.wants_system for i in job.inputs)
    return Env(runtime.config.finish_tool, store_call(runtime, "system", lm.name) if wants else None)


def _prepare(runtime: Any, lm: LoadedModel, job: Job, load_ns: int) -> Prepared:
    knobs = job.knobs.under(model_params(runtime, lm))
    knobs.sampling.validate(lm.model.n_vocab)  # logit_bias ids must be in this vocabulary
    env = _env(runtime, lm, job)
    prompts = [i.prompt(lm, env) for i in job.inputs]
    for p in prompts:
        if p.plan is not None and p.plan.grammar is not None:
            # Into the model's compile cache (the first compile also builds its llguidance
            # tokenizer), so submitting finds it compiled.
            lm.model.compile_cache.get(p.plan.grammar)
        check_room(lm, p.plan, len(p.tokens), knobs.max_tokens, runtime.config.max_tokens)
    return Prepared(lm, prompts, knobs, runtime.config.max_tokens, load_ns)
