"""The options every generating method takes, checked once, and the request a backend
receives for one round of generation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..chat.tools import ToolSpec
from ..errors import InvalidRequest
from .schema import OutputSpec, output_spec
from .tools import Tool, as_tool

__all__ = ["Options", "Ask", "ContextHandle", "options", "messages_of", "MessagesIn"]

MessagesIn = str | Sequence[dict[str, Any]]


@dataclass(frozen=True)
class Options:
    """Generation options. Sampling fields left None take the model's defaults (its GGUF
    `general.sampling.*`, then the server's flags), as on every API. `thinking`: None
    leaves the model's template to decide, False asks for no reasoning, an int is a budget
    of reasoning tokens. `tools` run in a loop of at most `max_tool_rounds` rounds when
    `run_tools`; after that the model answers in text. A forcing `tool_choice`
    ("required" or a tool's name) applies to the first round; later rounds are "auto",
    so the loop can end."""

    system: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    output: OutputSpec | None = None
    tools: tuple[Tool | ToolSpec, ...] = ()
    tool_choice: str = "auto"
    run_tools: bool = False
    max_tool_rounds: int = 4
    thinking: bool | int | None = None

    def sampling_given(self) -> dict[str, Any]:
        """The sampling fields this call set (the rest take the model's defaults)."""
        names = ("temperature", "top_p", "top_k", "min_p", "seed")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    @property
    def specs(self) -> list[ToolSpec]:
        return [t.spec if isinstance(t, Tool) else t for t in self.tools]

    def runnable(self) -> dict[str, Tool]:
        """The tools that have a function to run, by name."""
        return {t.name: t for t in self.tools if isinstance(t, Tool)}


_FIELDS = {f.name for f in fields(Options)}
_NUMBER = (int, float)
_TYPES: dict[str, tuple[type, ...]] = {
    "system": (str,),
    "max_tokens": (int,),
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "top_k": (int,),
    "min_p": _NUMBER,
    "seed": (int,),
    "tool_choice": (str,),
    "run_tools": (bool,),
    "max_tool_rounds": (int,),
    "thinking": (bool, int),
}


def options(**kw: Any) -> Options:
    """Options from a method's keyword arguments: types and ranges checked here, so a
    mistake is an InvalidRequest naming the option before anything runs."""
    unknown = set(kw) - _FIELDS
    if unknown:
        raise InvalidRequest(f"unknown option {sorted(unknown)[0]!r}", param=sorted(unknown)[0])
    for name, kinds in _TYPES.items():
        value = kw.get(name)
        bad_bool = isinstance(value, bool) and bool not in kinds
        if value is not None and (bad_bool or not isinstance(value, kinds)):
            want = " or ".join(k.__name__ for k in kinds)
            raise InvalidRequest(f"{name} must be {want}, not {value!r}", param=name)
    stop = kw.get("stop")
    if isinstance(stop, str):
        kw["stop"] = (stop,)
    elif stop is not None:
        kw["stop"] = tuple(stop)
    else:
        kw.pop("stop", None)
    if kw.get("output") is not None:
        kw["output"] = output_spec(kw["output"])
    raw_tools = kw.get("tools") or ()
    tools = tuple(as_tool(t) for t in raw_tools)
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise InvalidRequest("two tools have the same name", param="tools")
    kw["tools"] = tools
    opts = Options(**{k: v for k, v in kw.items() if v is not None})
    _check(opts)
    return opts


def _check(o: Options) -> None:
    if o.max_tokens is not None and o.max_tokens < 1:
        raise InvalidRequest(f"max_tokens must be at least 1 (got {o.max_tokens})", param="max_tokens")
    if o.max_tool_rounds < 0:
        raise InvalidRequest("max_tool_rounds must be >= 0", param="max_tool_rounds")
    if o.tool_choice not in ("auto", "none", "required") and o.tool_choice not in {t.name for t in o.specs}:
        raise InvalidRequest(
            'tool_choice must be "auto", "none", "required" or the name of one of the tools',
            param="tool_choice",
        )
    if o.tool_choice not in ("auto", "none") and not o.tools:
        raise InvalidRequest(f"tool_choice {o.tool_choice!r} needs tools", param="tool_choice")
    if isinstance(o.thinking, int) and not isinstance(o.thinking, bool) and o.thinking < 0:
        raise InvalidRequest("a thinking budget must be >= 0 tokens", param="thinking")
    if o.run_tools:
        missing = [t.name for t in o.specs if t.name not in o.runnable()]
        if missing:
            raise InvalidRequest(
                f"run_tools needs functions, but tool {missing[0]!r} has none", param="tools"
            )
    from ..types import SamplingParams

    SamplingParams(**o.sampling_given()).validate()  # ranges, each error naming its option


def messages_of(prompt: MessagesIn, system: str | None) -> list[dict[str, Any]]:
    """A str is one user message; a list of message dicts is used as it is (copied).
    `system` goes first, and may not be given twice."""
    if isinstance(prompt, str):
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, Sequence) and all(isinstance(m, dict) and "role" in m for m in prompt):
        messages = [dict(m) for m in prompt if isinstance(m, dict)]
    else:
        raise InvalidRequest(
            "a prompt is a string or a list of message dicts with a 'role'", param="messages"
        )
    if not messages:
        raise InvalidRequest("messages must not be empty", param="messages")
    if system is not None:
        if messages[0].get("role") == "system":
            raise InvalidRequest(
                "system= was given and the messages start with a system message too", param="system"
            )
        messages.insert(0, {"role": "system", "content": system})
    return messages


@dataclass
class ContextHandle:
    """A backend's hold on a context: its id in the engine that holds it (None once
    closed)."""

    id: str | None = None
    stale: bool = False  # the context no longer holds the conversation's prefix


@dataclass(frozen=True)
class Ask:
    """One round of generation for a backend: the conversation so far, the options, the
    tools offered this round (none in a round that must answer in text), the tool choice,
    whether the output schema applies, and the context to continue (None: none)."""

    messages: list[dict[str, Any]]
    opts: Options
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: str = "none"
    output: OutputSpec | None = None
    session: ContextHandle | None = None
