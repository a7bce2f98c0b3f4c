"""OpenAI request bodies parsed into typed records. Every bad field is a 400 naming it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...chat.flow import ChatOptions, effort_budget
from ...chat.prepare import Knobs
from ...chat.template import CHATML_TEMPLATE, ChatTemplate
from ...chat.tools import parse_tool_choice, parse_tools
from ...engine.repetition import RepetitionParams
from ...errors import InvalidRequest, Unsupported
from ...grammar import Grammar
from ...types import DRY_BREAKERS, MAX_BREAKERS, SamplingParams
from ..fields import Fields
from ..jsonformat import json_object, json_style, schema_grammar

__all__ = [
    "ChatRequest",
    "CompletionRequest",
    "parse_chat",
    "parse_completion",
    "Common",
    "LLAMA_SAMPLING",
    "llama_sampling",
]

MAX_N = 16
MAX_STOP = 16
# Prompts in one /v1/completions request: each becomes a queued generation.
MAX_PROMPTS = 64
# llama-server's further sampler fields: name -> (integer?, lowest, highest), the ranges
# SamplingParams.validate accepts. Their defaults are SamplingParams'.
LLAMA_SAMPLING: dict[str, tuple[bool, float, float]] = {
    "mirostat": (True, 0, 2),
    "mirostat_tau": (False, 0.0, 100.0),
    "mirostat_eta": (False, 0.0, 1.0),
    "tfs_z": (False, 0.0, 1.0),
    "xtc_probability": (False, 0.0, 1.0),
    "xtc_threshold": (False, 0.0, 1.0),
    "dry_multiplier": (False, 0.0, 100.0),
    "dry_base": (False, 1.0, 100.0),
    "dry_allowed_length": (True, 0, 1000),
    "dry_penalty_last_n": (True, -1, 1_000_000),
}
# llama-server sampler fields this server does not implement: only their "off" value passes.
UNSUPPORTED_SAMPLING: dict[str, Any] = {
    "dynatemp_range": 0, "dynatemp_exponent": 1, "top_n_sigma": -1, "min_keep": 0, "penalize_nl": False,
}  # fmt: skip
# Fields a request sets that a model's or the server's default must not replace.
_DEFAULTED = ("temperature", "top_p", "top_k", "min_p", "typical_p", "repeat_penalty", "repeat_last_n",
              "presence_penalty", "frequency_penalty")  # fmt: skip


@dataclass(frozen=True)
class Common:
    """Fields shared by chat and completions."""

    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    n: int
    stop: tuple[str, ...]
    sampling: SamplingParams
    grammar: Grammar | None = None
    session: str | None = None
    repetition: RepetitionParams | None = None
    cache_prompt: bool = True
    sampling_given: frozenset[str] = field(default_factory=frozenset)  # set by the request

    def knobs(self, *, keep_tokens: bool = False, prompt_logprobs: int | None = None) -> Knobs:
        """The pipeline's knobs: the model's and the server's sampling defaults go under the
        fields the request set (`Knobs.under`)."""
        return Knobs(
            sampling=self.sampling,
            given=self.sampling_given,
            max_tokens=self.max_tokens,
            stop=self.stop,
            n=self.n,
            repetition=self.repetition,
            cache_prompt=self.cache_prompt,
            keep_tokens=keep_tokens,
            prompt_logprobs=prompt_logprobs,
        )


@dataclass(frozen=True)
class ChatRequest:
    """`template`: the request's own `chat_template` (vLLM's field: Jinja source, or
    "chatml"), used instead of the model's; None: the model's."""

    common: Common
    options: ChatOptions
    logprobs: bool
    top_logprobs: int
    template: ChatTemplate | None = None


@dataclass(frozen=True)
class CompletionRequest:
    common: Common
    prompts: list[str | list[int]]
    echo: bool
    logprobs: int | None
    suffix: str | None = None  # fill-in-the-middle: the text that follows the insertion


def _logit_bias(f: Fields) -> tuple[tuple[int, float], ...]:
    raw = f.obj("logit_bias")
    if not raw:
        return ()
    out: list[tuple[int, float]] = []
    for key, value in raw.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise InvalidRequest(
                f"'logit_bias' keys must be token ids, not {key!r}", param="logit_bias"
            ) from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidRequest("'logit_bias' values must be numbers", param="logit_bias")
        out.append((token, float(value)))
    return tuple(out)


def llama_sampling(f: Fields) -> dict[str, Any]:
    """The llama-server sampler fields `f` holds (LLAMA_SAMPLING, `dry_sequence_breakers`),
    typed; a value out of range is a 400 naming it, and so is a sampler field this server
    does not implement (UNSUPPORTED_SAMPLING, `samplers`) unless it says "off". DRY's
    sequence breakers default to llama-server's (newline, colon, double quote, asterisk)."""
    for key, off in UNSUPPORTED_SAMPLING.items():
        value = f.raw(key)
        if value is not None and (value != off or isinstance(value, bool) != isinstance(off, bool)):
            name = f.name(key)
            raise InvalidRequest(
                f"'{name}' is not supported by this server (only {json.dumps(off)}, off)", param=name
            )
    if f.raw("samplers") is not None:
        raise InvalidRequest(
            f"'{f.name('samplers')}': the sampler order is fixed here", param=f.name("samplers")
        )
    out: dict[str, Any] = {}
    for key, (whole, lo, hi) in LLAMA_SAMPLING.items():
        value = f.integer(key, None, lo=int(lo), hi=int(hi)) if whole else f.number(key, None, lo=lo, hi=hi)
        if value is not None:
            out[key] = value
    breakers = f.array("dry_sequence_breakers")
    if breakers is not None:
        name = f.name("dry_sequence_breakers")
        if not all(isinstance(b, str) and b for b in breakers) or len(breakers) > MAX_BREAKERS:
            raise InvalidRequest(
                f"'{name}' must be an array of at most {MAX_BREAKERS} non-empty strings", param=name
            )
        out["dry_sequence_breakers"] = tuple(breakers)
    else:
        out["dry_sequence_breakers"] = DRY_BREAKERS
    return out


def _common(f: Fields, *, default_max: int | None, logprobs: int, min_tokens: int = 1) -> Common:
    """`min_tokens`: the smallest `max_tokens` allowed (0 on completions: prefill only)."""
    model = f.text("model", "") or ""
    stream = f.flag("stream", False)
    opts = f.obj("stream_options") or {}
    include_usage = Fields(opts, "stream_options").flag("include_usage", False)
    max_tokens = f.integer("max_completion_tokens", None, lo=min_tokens)
    if max_tokens is None:
        max_tokens = f.integer("max_tokens", default_max, lo=min_tokens)
    n = f.integer("n", 1, lo=1, hi=MAX_N)
    temperature = f.number("temperature", 1.0, lo=0.0, hi=2.0)
    extra = llama_sampling(f)
    sampling = SamplingParams(
        temperature=temperature,
        top_p=f.number("top_p", 1.0, lo=0.0, hi=1.0),
        top_k=f.integer("top_k", 0, lo=0),
        min_p=f.number("min_p", 0.0, lo=0.0, hi=1.0),
        typical_p=f.number("typical_p", 1.0, lo=0.0, hi=1.0) or 1.0,
        repeat_penalty=f.number("repeat_penalty", 1.0, lo=0.0, hi=10.0) or 1.0,
        repeat_last_n=f.integer("repeat_last_n", 64, lo=0, hi=1_000_000),
        presence_penalty=f.number("presence_penalty", 0.0, lo=-2.0, hi=2.0),
        frequency_penalty=f.number("frequency_penalty", 0.0, lo=-2.0, hi=2.0),
        logit_bias=_logit_bias(f),
        seed=f.integer("seed", None),
        logprobs=logprobs > 0,
        top_logprobs=max(0, logprobs - 1) if logprobs else 0,
        **extra,
    )
    session = f.text("llamay_session")
    if session is not None and n > 1:
        raise InvalidRequest("'n' must be 1 with 'llamay_session'", param="n")
    return Common(
        model,
        stream,
        include_usage,
        max_tokens,
        n,
        f.strings("stop", MAX_STOP),
        sampling.validate(),
        _grammar(f),
        session,
        _repetition(f),
        f.flag("cache_prompt", True),
        frozenset(k for k in (*_DEFAULTED, *extra) if f.raw(k) is not None),
    )


def _repetition(f: Fields) -> RepetitionParams | None:
    """`repetition`: false turns the n-gram penalty off; an object tunes it."""
    raw = f.raw("repetition")
    if raw is None:
        return None
    if isinstance(raw, bool):
        return RepetitionParams(enabled=raw)
    rf = Fields(raw, "repetition")
    d = RepetitionParams()
    return RepetitionParams(
        enabled=rf.flag("enabled", True),
        multiplier=rf.number("multiplier", d.multiplier),
        base=rf.number("base", d.base),
        allowed_length=rf.integer("allowed_length", d.allowed_length),
        window=rf.integer("window", d.window),
    ).validate()


def _grammar(f: Fields) -> Grammar | None:
    """`response_format` (OpenAI), or llama.cpp-style `grammar` (GBNF) / `regex`: at most one.
    Anything that cannot be enforced is a GrammarError (400) naming what and where."""
    given = [k for k in ("response_format", "grammar", "regex") if f.raw(k) is not None]
    if len(given) > 1:
        raise InvalidRequest(f"give only one of {', '.join(given)}", param=given[1])
    if f.raw("grammar") is not None:
        return Grammar.from_gbnf(f.text("grammar"), param="grammar")
    if f.raw("regex") is not None:
        return Grammar.from_regex(f.text("regex"), param="regex")
    fmt = f.obj("response_format")
    if fmt is None:
        return None
    ff = Fields(fmt, "response_format")
    kind = ff.text("type", required=True)
    if kind == "text":
        return None
    style = json_style(f)
    if kind == "json_object":
        return json_object(style, param="response_format")
    if kind == "json_schema":
        spec = Fields(ff.obj("json_schema") or {}, "response_format.json_schema")
        schema = spec.raw("schema")
        if schema is None:
            raise InvalidRequest(
                "'response_format.json_schema.schema' is required", param="response_format.json_schema.schema"
            )
        # strict: a keyword that cannot be enforced is a 400; otherwise it is validated
        # afterwards and reported on the choice (jsonformat.check).
        strict = bool(spec.flag("strict", False))
        return schema_grammar(schema, style, strict=strict, param="response_format")
    raise InvalidRequest(
        f"'response_format.type' must be one of text, json_object, json_schema (got {kind!r})",
        param="response_format.type",
    )


# Chat fields that change what a request means and that this server does not implement:
# refused by name rather than dropped.
UNSUPPORTED_CHAT = {
    "web_search_options": "a web search before answering",
    "audio": "audio output",
    "functions": "legacy function calling; send 'tools'",
    "function_call": "legacy function calling; send 'tool_choice'",
}


def _modalities(f: Fields) -> None:
    raw = f.raw("modalities")
    if raw is not None and raw != ["text"]:
        raise Unsupported("'modalities' other than [\"text\"] is not supported by this server", param="modalities")


def parse_chat(body: Any) -> ChatRequest:
    f = Fields(body)
    f.refuse(UNSUPPORTED_CHAT)
    _modalities(f)
    messages = f.array("messages", required=True)
    if not messages:
        raise InvalidRequest("'messages' must contain at least one message", param="messages")
    for i, m in enumerate(messages):
        mf = Fields(m, f"messages[{i}]")
        mf.text("role", required=True)
        content = mf.raw("content")
        if content is not None and not isinstance(content, str | list):
            raise InvalidRequest(
                f"'messages[{i}].content' must be a string or an array of content parts",
                param=f"messages[{i}].content",
            )
    want_logprobs = f.flag("logprobs", False)
    top = f.integer("top_logprobs", 0, lo=0, hi=20)
    if top and not want_logprobs:
        raise InvalidRequest("'top_logprobs' requires 'logprobs': true", param="top_logprobs")
    # Internally top_logprobs counts alternatives; `logprobs` n means "chosen + n-1 others".
    common = _common(f, default_max=None, logprobs=(1 + top) if want_logprobs else 0)
    options = chat_options(f, list(messages), common.grammar)
    return ChatRequest(common, options, want_logprobs, top, request_template(f.text("chat_template")))


#: Characters of a request's own chat template.
MAX_TEMPLATE = 64 * 1024


def request_template(source: str | None) -> ChatTemplate | None:
    """A request's `chat_template`, compiled (in the sandbox every template renders in);
    a 400 naming the field if it is too long or does not compile."""
    if source is None:
        return None
    if source == "chatml":
        return ChatTemplate(CHATML_TEMPLATE)
    if len(source) > MAX_TEMPLATE:
        raise InvalidRequest(
            f"'chat_template' is longer than {MAX_TEMPLATE} characters", param="chat_template"
        )
    try:
        return ChatTemplate(source)
    except ValueError as e:
        raise InvalidRequest(f"'chat_template': {e}", param="chat_template") from None


# What the server passes to a chat template itself (Template.render's arguments and the
# sandbox's functions): a request's chat_template_kwargs may not set them.
RESERVED_TEMPLATE_VARIABLES = frozenset(
    {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "raise_exception", "strftime_now"}
)


def chat_options(f: Fields, messages: list[dict[str, Any]], grammar: Grammar | None) -> ChatOptions:
    """Tools, reasoning and template options of an OpenAI chat body."""
    raw_tools = f.raw("tools")
    tools = parse_tools(raw_tools) if raw_tools else []
    choice = parse_tool_choice(f.raw("tool_choice"), tools)
    kwargs = dict(f.obj("chat_template_kwargs") or {})
    taken = sorted(RESERVED_TEMPLATE_VARIABLES.intersection(kwargs))
    if taken:
        raise InvalidRequest(
            f"'chat_template_kwargs' may not set {', '.join(repr(k) for k in taken)}: the server "
            "passes that to the template itself",
            param="chat_template_kwargs",
        )
    effort = f.text("reasoning_effort")
    thinking = effort != "none" and kwargs.get("enable_thinking") is not False and f.flag("think", True)
    finish = f.raw("finish_tool")
    if finish is not None and not isinstance(finish, bool | str):
        raise InvalidRequest("'finish_tool' must be true, false or a tool name", param="finish_tool")
    return ChatOptions(
        messages=messages,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=f.flag("parallel_tool_calls", None),  # None: the template decides
        grammar=grammar,
        thinking=thinking,
        thinking_budget=_budget(f.integer("reasoning_budget_tokens", None, lo=0), effort),
        template_kwargs=kwargs,
        finish_tool=finish,
        effort=_asked(f, effort, kwargs),
    )


def _asked(f: Fields, effort: str | None, kwargs: dict[str, Any]) -> str | None:
    """The thinking the body asked for by name (ChatOptions.effort)."""
    if effort is not None:
        return None if effort == "none" else effort
    asked = kwargs.get("enable_thinking") is True or f.raw("think") is True
    return "on" if asked or (f.integer("reasoning_budget_tokens", None, lo=0) or 0) > 0 else None


def _budget(tokens: int | None, effort: str | None) -> int | None:
    """`reasoning_budget_tokens`, else the budget of `reasoning_effort`'s level."""
    return tokens if tokens is not None else effort_budget(effort)


def parse_completion(body: Any) -> CompletionRequest:
    f = Fields(body)
    raw = f.raw("prompt")
    if raw is None:
        raise InvalidRequest("'prompt' is required", param="prompt")
    prompts = _prompts(raw)
    suffix = f.raw("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise InvalidRequest("'suffix' must be a string", param="suffix")
    logprobs = f.integer("logprobs", None, lo=0, hi=5)
    # max_tokens 0 reads the prompt only: with echo and logprobs, to score it.
    common = _common(f, default_max=16, logprobs=(1 + logprobs) if logprobs is not None else 0, min_tokens=0)
    best_of = f.integer("best_of", None, lo=1)
    if best_of is not None and best_of != common.n:
        raise InvalidRequest("'best_of' other than 'n' is not supported", param="best_of")
    echo = bool(f.flag("echo", False))
    if suffix and echo:
        raise InvalidRequest("'echo' cannot be combined with 'suffix' (fill-in-the-middle)", param="suffix")
    return CompletionRequest(common, prompts, echo, logprobs, suffix or None)


def _prompts(raw: Any) -> list[str | list[int]]:
    """A string, a list of strings, a list of token ids, or a list of token-id lists."""
    bad = InvalidRequest(
        "'prompt' must be a string, an array of strings, an array of token ids, or an array of such arrays",
        param="prompt",
    )
    if isinstance(raw, str):
        return [raw]
    if not isinstance(raw, list) or not raw:
        raise bad
    if len(raw) > MAX_PROMPTS and not all(isinstance(x, int) for x in raw):
        raise InvalidRequest(
            f"'prompt' has {len(raw)} prompts; at most {MAX_PROMPTS} are taken per request", param="prompt"
        )
    if all(isinstance(x, str) for x in raw):
        return list(raw)
    if all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        return [list(raw)]
    if all(
        isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool) for t in x)
        for x in raw
    ):
        return [list(x) for x in raw]
    raise bad
