"""Ollama request bodies parsed into typed records. Every bad field is a 400 naming it.

Sampling defaults are Ollama's (temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1
over the last 64 tokens), so code written for Ollama samples the same way here, with a
model's own and the server's defaults over them (`OllamaKnobs.under`). Every
sampling option works (mirostat, tfs_z, and llama.cpp's xtc_* and dry_* names too) or is a
400 naming it; options that tune hardware or loading (GPU layers, mmap, threads, ...) are
accepted and ignored; unknown options are logged and ignored, as Ollama does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ...chat.prepare import Knobs
from ...chat.tools import ToolSpec, parse_tools
from ...errors import InvalidRequest
from ...grammar import Grammar
from ...types import SamplingParams
from ..fields import Fields
from ..jsonformat import json_object, json_style, schema_grammar
from ..openai.schemas import LLAMA_SAMPLING, llama_sampling
from .messages import chat_messages, no_images

__all__ = [
    "Common",
    "Generation",
    "OllamaKnobs",
    "knobs_of",
    "OllamaChat",
    "OllamaGenerate",
    "parse_chat",
    "parse_generate",
    "go_duration",
    "parse_keep_alive",
    "parse_options",
]

log = logging.getLogger("llamay.api.ollama")

THINK_LEVELS = ("low", "medium", "high", "max")
MAX_STOP = 16
# Accepted for compatibility; they tune hardware or loading, which this server sets itself.
IGNORED_OPTIONS = frozenset(
    [
        "numa",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "low_vram",
        "f16_kv",
        "logits_all",
        "vocab_only",
        "use_mmap",
        "use_mlock",
        "embedding_only",
        "num_thread",
        "num_keep",
        "draft_num_predict",
    ]
)
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# The longest keep_alive text read. Go's longest duration, "2562047h47m16.854775807s", has
# 24 characters; the cap is checked before any parsing so no input costs more than this.
MAX_DURATION_CHARS = 64
_DIGITS = frozenset("0123456789")


@dataclass(frozen=True)
class Generation:
    """How to sample and when to stop. `num_predict` None: until the context is full.
    `num_ctx` is what the client asked for (the loaded context is fixed; logged only).
    `repeat_whole_context`: repeat_last_n was -1 (Ollama: the whole context)."""

    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: tuple[str, ...] = ()
    num_predict: int | None = None
    num_ctx: int | None = None
    repeat_whole_context: bool = False


@dataclass(frozen=True)
class Common:
    """Fields /api/chat and /api/generate share. `keep_alive` in seconds: None = the
    server's default, 0 = unload when idle, negative = keep loaded. `think` None: the
    model's default (a thinking model thinks, reported apart); `think_level` a level name."""

    model: str
    stream: bool
    keep_alive: float | None
    gen: Generation
    grammar: Grammar | None
    think: bool | None
    think_level: str | None
    logprobs: bool
    options: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def knobs(self) -> OllamaKnobs:
        """The pipeline's knobs, with a model's parameters to go under the options."""
        return knobs_of(self.gen, self.options)


@dataclass(frozen=True)
class OllamaKnobs(Knobs):
    """Knobs read from Ollama's `options`. A model's parameters (from `create`, or the
    GGUF's general.sampling.*, or the server's flags) go under them by reading the options
    again over them: request over model over Ollama's defaults, for every option (a
    model's `stop` and `num_predict` too). `num_ctx`: what the client asked for (logged)."""

    options: Mapping[str, Any] = field(default_factory=dict)
    num_ctx: int | None = None

    def under(self, params: Mapping[str, Any]) -> OllamaKnobs:
        if not params:
            return self
        s = self.sampling
        gen = parse_options({**params, **self.options}, logprobs=s.logprobs, top_logprobs=s.top_logprobs)
        return knobs_of(gen, self.options)


def knobs_of(gen: Generation, options: Mapping[str, Any] | None = None) -> OllamaKnobs:
    """Parsed options as the pipeline's knobs: num_predict is max_tokens, and every
    token's events are kept (for the final object's `context` and log-probs)."""
    return OllamaKnobs(
        sampling=gen.sampling,
        max_tokens=gen.num_predict,
        stop=gen.stop,
        keep_tokens=True,
        whole_context_repeat=gen.repeat_whole_context,
        options=dict(options or {}),
        num_ctx=gen.num_ctx,
    )


@dataclass(frozen=True)
class OllamaChat:
    """`messages` are already in the shape chat templates and tool formats expect."""

    common: Common
    messages: list[dict[str, Any]]
    tools: list[ToolSpec]


@dataclass(frozen=True)
class OllamaGenerate:
    common: Common
    prompt: str
    system: str | None
    template: str | None
    raw: bool
    context: list[int] | None
    suffix: str | None = None  # fill-in-the-middle: the text after the insertion


def parse_keep_alive(value: Any, param: str = "keep_alive") -> float | None:
    """Ollama's keep_alive: a number of seconds or a Go duration ("5m", "1h30m", "-1m");
    any negative value means "keep loaded". Returns seconds (negative kept as -1.0). Text
    longer than MAX_DURATION_CHARS is a 400 before it is parsed (`go_duration` is linear
    anyway)."""
    if value is None:
        return None
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and len(value) <= MAX_DURATION_CHARS:
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        try:
            seconds = sign * float(body)  # a bare number: seconds
        except ValueError:
            parsed = go_duration(body)
            seconds = None if parsed is None else sign * parsed
    if seconds is None or seconds != seconds:
        raise InvalidRequest(
            f'\'{param}\' must be a duration such as "5m" or "1h30m", or a number of seconds '
            f"(negative: keep loaded), not {value!r:.80}",
            param=param,
        )
    return -1.0 if seconds < 0 else seconds


def go_duration(text: str) -> float | None:
    """Seconds in an unsigned Go duration ("1h30m", "1.5s", ".5ms"), or None if `text` is
    not one. One left-to-right pass, each character looked at once: a number (digits, and
    a dot followed by at least one digit), then a unit; repeated to the end."""
    total, i, n = 0.0, 0, len(text)
    if n == 0:
        return None
    while i < n:
        start = i
        while i < n and text[i] in _DIGITS:
            i += 1
        whole = i > start
        if i < n and text[i] == ".":
            i += 1
            frac = i
            while i < n and text[i] in _DIGITS:
                i += 1
            if i == frac:  # "5." has no digit after its dot
                return None
        elif not whole:
            return None
        number = float(text[start:i])
        unit = text[i : i + 2] if text[i : i + 2] in _UNIT_SECONDS else text[i : i + 1]
        if unit not in _UNIT_SECONDS:
            return None
        total += number * _UNIT_SECONDS[unit]
        i += len(unit)
    return total


def parse_options(raw: Any, *, logprobs: bool = False, top_logprobs: int = 0) -> Generation:
    """The `options` object (may be None). Values out of range are a 400 naming them."""
    f = Fields(raw if raw is not None else {}, "options")
    for key in f.body:
        if key in IGNORED_OPTIONS:
            log.debug("ignoring Ollama option %r: not used by this server", key)
        elif key not in _KNOWN_OPTIONS:
            log.warning("ignoring unknown Ollama option %r", key)
    seed = f.integer("seed", None)
    num_predict = f.integer("num_predict", None)
    repeat_last_n = f.integer("repeat_last_n", 64, lo=-1, hi=1_000_000)
    if f.flag("penalize_newline", True) is False:
        # Exempting the newline token needs its id, which the sampler is not given.
        raise InvalidRequest(
            "'options.penalize_newline' false is not supported: newlines are penalised like any token",
            param="options.penalize_newline",
        )
    typical_p = f.number("typical_p", 1.0, lo=0.0, hi=1.0)
    repeat_penalty = f.number("repeat_penalty", 1.1, lo=0.0, hi=10.0)
    sampling = SamplingParams(
        temperature=f.number("temperature", 0.8, lo=0.0),
        top_k=max(0, f.integer("top_k", 40)),
        top_p=f.number("top_p", 0.9, lo=0.0, hi=1.0),
        min_p=f.number("min_p", 0.0, lo=0.0, hi=1.0),
        typical_p=typical_p or 1.0,  # 0 means "off" to Ollama
        repeat_penalty=repeat_penalty or 1.0,
        repeat_last_n=max(0, repeat_last_n),
        presence_penalty=f.number("presence_penalty", 0.0),
        frequency_penalty=f.number("frequency_penalty", 0.0),
        seed=None if seed is None or seed < 0 else seed,  # -1: a random seed
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        **llama_sampling(f),
    )
    try:
        sampling.validate()
    except InvalidRequest as exc:
        raise InvalidRequest(exc.message.replace("'", "'options.", 1), param=f"options.{exc.param}") from None
    return Generation(
        sampling=sampling,
        stop=f.strings("stop", MAX_STOP),
        num_predict=None if num_predict is None or num_predict < 0 else num_predict,
        num_ctx=f.integer("num_ctx", None, lo=1),
        repeat_whole_context=repeat_last_n == -1,
    )


_KNOWN_OPTIONS = frozenset(
    [
        "seed",
        "num_predict",
        "repeat_last_n",
        "typical_p",
        "repeat_penalty",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "stop",
        "num_ctx",
        "penalize_newline",
        "dry_sequence_breakers",
        *LLAMA_SAMPLING,
    ]
)


def _format(f: Fields) -> Grammar | None:
    """`format`: "json" (any JSON object) or a JSON schema, with the shared `strict`,
    `json_layout` and `schema_shape` fields (see api.jsonformat)."""
    raw = f.raw("format")
    if raw is None or raw == "":
        return None
    style = json_style(f)
    if raw == "json":
        return json_object(style, param="format")
    if isinstance(raw, Mapping):
        # `strict` (a llamay extension): refuse what cannot be enforced, instead of
        # validating it afterwards and reporting it in `schema_check`.
        return schema_grammar(dict(raw), style, strict=bool(f.flag("strict", False)), param="format")
    raise InvalidRequest(f"'format' must be \"json\" or a JSON schema object, not {raw!r}", param="format")


def _think(f: Fields) -> tuple[bool | None, str | None]:
    raw = f.raw("think")
    if raw is None or isinstance(raw, bool):
        return raw, None
    if isinstance(raw, str) and raw in THINK_LEVELS:
        return True, raw
    raise InvalidRequest(
        f"'think' must be true, false or one of {', '.join(THINK_LEVELS)}, not {raw!r}", param="think"
    )


def _common(f: Fields) -> Common:
    model = f.text("model", "") or ""
    want_logprobs = bool(f.flag("logprobs", False))
    top = f.integer("top_logprobs", 0, lo=0, hi=20)
    options = dict(f.obj("options") or {})
    gen = parse_options(options, logprobs=want_logprobs or top > 0, top_logprobs=top)
    think, level = _think(f)
    return Common(
        model=model,
        stream=bool(f.flag("stream", True)),
        keep_alive=parse_keep_alive(f.raw("keep_alive")),
        gen=gen,
        grammar=_format(f),
        think=think,
        think_level=level,
        logprobs=want_logprobs or top > 0,
        options=options,
    )


def parse_chat(body: Any) -> OllamaChat:
    """POST /api/chat. Empty `messages` is a load (or, with keep_alive 0, an unload)."""
    f = Fields(body)
    messages = f.array("messages") or []
    raw_tools = f.array("tools") or []
    # Ollama does not require "type"; every tool is a function.
    tools = [
        {"type": "function", **t} if isinstance(t, Mapping) and "type" not in t else t for t in raw_tools
    ]
    # Names as Ollama takes them ("weather.get"), not only OpenAI's [A-Za-z0-9_-].
    parsed = parse_tools(tools, loose_names=True) if tools else []
    return OllamaChat(_common(f), chat_messages(messages), parsed)


def parse_generate(body: Any) -> OllamaGenerate:
    """POST /api/generate. An empty prompt is a load (or, with keep_alive 0, an unload)."""
    f = Fields(body)
    no_images(f.raw("images"), "images")
    suffix = f.text("suffix") or None
    context = f.array("context")
    if context is not None and not all(isinstance(t, int) and not isinstance(t, bool) for t in context):
        raise InvalidRequest("'context' must be an array of token ids", param="context")
    if suffix is not None and (context or f.text("template")):
        raise InvalidRequest(
            "'suffix' (fill-in-the-middle) takes the prompt as it is: no 'context' or 'template'",
            param="suffix",
        )
    return OllamaGenerate(
        common=_common(f),
        prompt=f.text("prompt", "") or "",
        system=f.text("system") or None,
        template=f.text("template") or None,
        raw=bool(f.flag("raw", False)),
        context=list(context) if context else None,
        suffix=suffix,
    )
