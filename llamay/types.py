"""Small typed records that cross layer boundaries.

`SamplingParams` is the one home of every sampling knob: validated once at the API edge
(`validate()`), then read-only everywhere. Engine events are small frozen dataclasses.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from .errors import InvalidRequest

__all__ = [
    "SamplingParams",
    "DRY_BREAKERS",
    "DEFAULTABLE",
    "MAX_BREAKERS",
    "StopSpec",
    "TopLogprob",
    "PromptLogprob",
    "TokenEvent",
    "FinishEvent",
    "ErrorEvent",
    "Event",
    "Usage",
    "FinishReason",
]

MAX_BREAKERS = 32
DRY_BREAKERS = ("\n", ":", '"', "*")
"""llama.cpp's default DRY sequence breakers."""

FinishReason = Literal["stop", "length", "abort", "error", "tool_calls"]


@dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token.

    temperature <= 0 means greedy (argmax after penalties and bias). `top_k` 0 and
    `top_p`/`typical_p` 1.0 and `min_p` 0.0 disable those filters. Penalties follow
    llama.cpp's meanings: `repeat_penalty` divides positive logits (multiplies
    negative ones) of tokens seen in the last `repeat_last_n` tokens; `presence_penalty`
    and `frequency_penalty` follow OpenAI (subtract once / per occurrence) over the same
    window. `logit_bias` maps token id -> added bias (-inf bans). `seed` None means a
    random seed chosen when the request is admitted. `top_logprobs` > 0 implies logprobs.

    llama.cpp's further samplers (see engine/samplers_extra.py for the exact rules):
    `mirostat` 1 or 2 replaces the truncation filters with Mirostat v1/v2 (target surprise
    `mirostat_tau`, learning rate `mirostat_eta`); `tfs_z` < 1 is tail-free sampling;
    `xtc_probability` > 0 (with `xtc_threshold` <= 0.5) is XTC; `dry_multiplier` > 0 is the
    DRY penalty (`dry_base`, `dry_allowed_length`, over the last `dry_penalty_last_n` tokens,
    -1 the whole context; `dry_sequence_breakers` end a repetition). Defaults leave them off.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    tfs_z: float = 1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def with_defaults(self, defaults: Mapping[str, Any], given: Collection[str] = ()) -> SamplingParams:
        """This record with `defaults` (field name -> value: a model's and the server's) for
        every field not in `given` (those the request set itself). Names that are not
        defaultable sampling fields are skipped, and so is a negative `repeat_last_n` (the
        whole context, which only Ollama's parser resolves). InvalidRequest when the result
        is out of range."""
        changes: dict[str, Any] = {
            k: tuple(v) if k == "dry_sequence_breakers" else v
            for k, v in defaults.items()
            if k in DEFAULTABLE and k not in given and not (k == "repeat_last_n" and v < 0)
        }
        return replace(self, **changes).validate() if changes else self

    def validate(self, n_vocab: int | None = None) -> SamplingParams:
        """Raise InvalidRequest naming the first bad field; return self when valid."""
        checks: list[tuple[str, bool, str]] = [
            ("temperature", 0.0 <= self.temperature <= 100.0, "must be between 0 and 100"),
            ("top_k", self.top_k >= 0, "must be >= 0"),
            ("top_p", 0.0 <= self.top_p <= 1.0, "must be between 0 and 1"),
            ("min_p", 0.0 <= self.min_p <= 1.0, "must be between 0 and 1"),
            ("typical_p", 0.0 < self.typical_p <= 1.0, "must be in (0, 1]"),
            ("repeat_penalty", 0.0 < self.repeat_penalty <= 10.0, "must be in (0, 10]"),
            ("repeat_last_n", self.repeat_last_n >= 0, "must be >= 0"),
            ("presence_penalty", -2.0 <= self.presence_penalty <= 2.0, "must be between -2 and 2"),
            ("frequency_penalty", -2.0 <= self.frequency_penalty <= 2.0, "must be between -2 and 2"),
            ("top_logprobs", 0 <= self.top_logprobs <= 20, "must be between 0 and 20"),
            ("mirostat", self.mirostat in (0, 1, 2), "must be 0, 1 or 2"),
            ("mirostat_tau", 0.0 <= self.mirostat_tau <= 100.0, "must be between 0 and 100"),
            ("mirostat_eta", 0.0 <= self.mirostat_eta <= 1.0, "must be between 0 and 1"),
            ("tfs_z", 0.0 <= self.tfs_z <= 1.0, "must be between 0 and 1"),
            ("xtc_probability", 0.0 <= self.xtc_probability <= 1.0, "must be between 0 and 1"),
            ("xtc_threshold", 0.0 <= self.xtc_threshold <= 1.0, "must be between 0 and 1"),
            ("dry_multiplier", 0.0 <= self.dry_multiplier <= 100.0, "must be between 0 and 100"),
            ("dry_base", 1.0 <= self.dry_base <= 100.0, "must be between 1 and 100"),
            ("dry_allowed_length", 0 <= self.dry_allowed_length <= 1000, "must be between 0 and 1000"),
            (
                "dry_penalty_last_n",
                -1 <= self.dry_penalty_last_n <= 1_000_000,
                "must be between -1 and 1000000",
            ),
            (
                "dry_sequence_breakers",
                len(self.dry_sequence_breakers) <= MAX_BREAKERS and all(self.dry_sequence_breakers),
                f"must hold at most {MAX_BREAKERS} non-empty strings",
            ),
        ]
        for name, ok, why in checks:
            value = getattr(self, name)
            if not ok or (isinstance(value, float) and math.isnan(value)):
                raise InvalidRequest(f"'{name}' {why} (got {value!r})", param=name)
        for token, bias in self.logit_bias:
            if n_vocab is not None and not 0 <= token < n_vocab:
                raise InvalidRequest(
                    f"'logit_bias' names token {token}, outside the vocabulary (0..{n_vocab - 1})",
                    param="logit_bias",
                )
            if math.isnan(bias) or not -100.0 <= bias <= 100.0 and not math.isinf(bias):
                raise InvalidRequest(
                    f"'logit_bias' values must be between -100 and 100 (got {bias!r})", param="logit_bias"
                )
        return self


DEFAULTABLE = frozenset(
    f.name for f in fields(SamplingParams) if f.name not in ("logit_bias", "seed", "logprobs", "top_logprobs")
)
"""SamplingParams fields a model or the server may give defaults for."""


@dataclass(frozen=True)
class StopSpec:
    """When generation ends: `max_tokens` (None: until the context is full), stop strings
    (never included in output), and whether end-of-generation tokens are ignored.
    `asked`: the max_tokens the request wanted when the context's room cut it to
    `max_tokens` (said in the finish message); None when it was not cut."""

    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    asked: int | None = None


@dataclass(frozen=True)
class TopLogprob:
    token: int
    text: bytes
    logprob: float


@dataclass(frozen=True)
class PromptLogprob:
    """Prompt token `token` (bytes `text`) scored by the logits of the position before it:
    its log-probability under the raw model and the `top` most likely tokens there."""

    token: int
    text: bytes
    logprob: float
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    # Of completion_tokens, those spent thinking (set by the chat pipeline, which splits them).
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class TokenEvent:
    """One sampled token. `text` is the newly visible text (may be empty while bytes of a
    multi-byte character or a possible stop string are held back)."""

    token: int
    text: str
    logprob: float | None = None
    top: tuple[TopLogprob, ...] = ()
    token_bytes: bytes = b""


@dataclass(frozen=True)
class FinishEvent:
    reason: FinishReason
    usage: Usage
    text: str = ""  # any held-back text released at the end
    message: str | None = None  # why, when the reason is not plain
    extra: dict[str, Any] = field(default_factory=dict)
    # Asked with GenerateRequest.prompt_logprobs: one entry per prompt token after the
    # first, present only when the whole prompt was scored.
    prompt_logprobs: tuple[PromptLogprob, ...] | None = None


@dataclass(frozen=True)
class ErrorEvent:
    error: Exception


Event = TokenEvent | FinishEvent | ErrorEvent
