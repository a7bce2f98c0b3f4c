"""What every tool-call format provides (`ToolFormat`), its generation plan (`ToolPlan`),
and the Lark building blocks the formats share.

Grammars are llguidance Lark: a call's envelope (`{"name": "x", "arguments": ...}`, tags)
is written as literals with bounded optional whitespace, and each tool's arguments are its
own `%json {...}` root (see spec.args_rule), reached only through that tool's name literal,
so the schema that applies is decided before the arguments start.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ...grammar import Grammar
from ...grammar.shape import Layout
from ..template import normalize_messages
from .spec import ToolChoice, ToolSpec, args_rule, openai_tools

if TYPE_CHECKING:
    from ..reasoning import ReasoningMarkers
    from .stream import ToolStreamParser

__all__ = [
    "Special",
    "TemplateFormat",
    "ToolFormat",
    "ToolPlan",
    "LarkRules",
    "lit",
    "marker",
    "seq",
    "raw_until",
    "chosen_tools",
    "marked_plan",
    "think_first",
]

Special = Callable[[str], "int | None"]
"""`special(text)` is the token id when `text` is one special/control token of the
model's vocabulary, else None."""

# Bounded so a constrained model cannot spin on blank lines between envelope parts.
# One gap in a call's envelope: a space, or one or two newlines (between a marker and its
# JSON, or after a think block), indented when the format's layout is. Wider gaps are valid
# JSON but only let a model spend its budget on whitespace.
WS_RULE = "ws: /[ \\t]{1,4}|\\r?\\n{1,2}[ \\t]{0,8}/"
INDENTED_WS_RULE = "ws: /[ \\t]|\\n{1,2}[ \\t]{0,16}/"


@dataclass(frozen=True)
class ToolPlan:
    """How to constrain generation for tool calls.

    `immediate`: `grammar` covers the whole output from the first generated token
    (tool_choice "required"/named, or a format whose every answer is JSON); the engine
    activates it at once and ignores the triggers. Otherwise the grammar describes only
    what follows a trigger: the engine samples freely until it samples one of
    `trigger_tokens` or the generated text ends with `trigger_text`, then activates it.
    The grammar ends where the output must end (nothing may follow the last call).
    """

    grammar: Grammar
    trigger_tokens: frozenset[int] = frozenset()
    trigger_text: str | None = None
    immediate: bool = False


class ToolFormat(Protocol):
    """One model family's way of rendering tools and emitting calls."""

    name: str

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Messages to render and extra template variables (pass both to
        ChatTemplate.render). Rewrites history (assistant `tool_calls`, `role: "tool"`
        results) into what the format's templates expect. With `tools` empty
        (tool_choice "none") only history is rewritten and no tools are offered."""
        ...

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        """The constraint for `choice` ("auto", "required" or "function"; never "none").
        Only `tools` (a named choice: only that one) may be called, each call's
        arguments valid under its schema, more than one call only when `parallel`."""
        ...

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        """A fresh stream parser for one generation's content."""
        ...


class TemplateFormat:
    """Defaults for a format whose templates render the OpenAI-shaped `tools` and the
    history (assistant `tool_calls`, `tool` results) themselves. `interrupts`: markers
    of this format's calls that end an unclosed think block (see ReasoningMarkers)."""

    name = ""
    interrupts: tuple[str, ...] = ()

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return normalize_messages(messages), ({"tools": openai_tools(tools)} if tools else {})


def chosen_tools(tools: Sequence[ToolSpec], choice: ToolChoice) -> list[ToolSpec]:
    """The tools the grammar may call under `choice`."""
    if choice.mode == "none":
        raise ValueError('tool_choice "none" has no plan: generate without a constraint')
    if choice.mode == "function":
        return [t for t in tools if t.name == choice.name]
    return list(tools)


def lit(text: str) -> str:
    """A Lark string literal for `text`. A `<` starts its own literal so that text such
    as "<tool_call>" is never mistaken for a special-token reference (Grammar.from_lark
    flags `<name>` as one)."""
    quoted = [json.dumps(p, ensure_ascii=False) for p in re.split("(<)", text) if p]
    return " ".join(quoted) if quoted else '""'


def marker(text: str, special: Special) -> str:
    """`text` as the model's special token when it is one (`<[id]>`, so only the real
    token matches, never the same characters spelled out), else as a literal."""
    token = special(text)
    return f"<[{token}]>" if token is not None else lit(text)


# Spellings of control tokens: <|x|>, <｜x｜> (DeepSeek), [X] (Mistral), <x> / </x>.
_TOKENISH = re.compile(r"<\|[^<>|\s]{1,40}\|>|<｜[^<>｜]{1,40}｜>|\[/?[A-Z_]{2,24}\]|</?[A-Za-z_:.]{1,32}>")


def seq(text: str, special: Special) -> str:
    """`text` as Lark, each part of it that is one special token of the model as that
    token (see `marker`), the rest as literals."""
    parts: list[str] = []
    at = 0
    for m in _TOKENISH.finditer(text):
        token = special(m.group())
        if token is None:
            continue
        if m.start() > at:
            parts.append(lit(text[at : m.start()]))
        parts.append(f"<[{token}]>")
        at = m.end()
    if at < len(text) or not parts:
        parts.append(lit(text[at:]))
    return " ".join(parts)


def raw_until(rules: LarkRules, close: str, special: Special) -> str:
    """Any text up to the first `close` and `close` itself: the special token when it is
    one (text cannot contain it), else a lazy regex that ends at its first occurrence."""
    token = special(close)
    if token is not None:
        return f"/(?s:.*)/ <[{token}]>"
    name = "raw_" + "".join(f"{ord(c):x}" for c in close)[:48]
    return rules.add(f"{name}[lazy]", f"/(?s:.*){regex_text(close)}/")


def regex_text(text: str) -> str:
    """`text` escaped for a Lark regex literal (`/.../`); `<` as `\\x3C`, so that a tag
    in the regex never reads as a token reference (see Grammar.uses_tokens)."""
    out = []
    for c in text:
        if c == "<":
            out.append("\\x3C")
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif c in "\\.+*?()|[]{}^$/#&-~":
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


class LarkRules:
    """Accumulates named rules; `grammar(start)` compiles them with `start` as root."""

    def __init__(self, layout: Layout = "spaced") -> None:
        """`layout`: how calls' JSON is laid out ("spaced", or "indented" for formats whose
        template indents it); it sets the envelope's gaps and the arguments' layout."""
        self.layout: Layout = layout
        self._rules: list[str] = [INDENTED_WS_RULE if layout == "indented" else WS_RULE]
        self._names: set[str] = set()

    def add(self, name: str, body: str) -> str:
        """Define rule `name` (once; `name[lazy]` defines a lazy `name`); its reference."""
        if name not in self._names:
            self._names.add(name)
            self._rules.append(f"{name}: {body}")
        return name.split("[", 1)[0]

    def args(self, index: int, tool: ToolSpec) -> str:
        """The rule for tool `index`'s arguments object."""
        return self.add(f"args_{index}", args_rule(tool, layout=self.layout))

    def call_object(self, tools: Sequence[ToolSpec], args_key: str, *, optional_id: bool = False) -> str:
        """`{"name": "<tool>", "<args_key>": <arguments>}` for any of `tools`, whitespace
        allowed between parts; `optional_id` allows a trailing `"id": "<9 alnum>"`
        (Mistral's own call ids)."""
        return self.add(
            "call",
            f'"{{" ws? {lit(json.dumps("name"))} ws? ":" ws? {self.named(tools, args_key, optional_id)} ws? "}}"',
        )

    def named(
        self, tools: Sequence[ToolSpec], args_key: str, optional_id: bool = False, *, open_quote: bool = True
    ) -> str:
        """From the name's opening quote (or just after it, `open_quote=False`) to the
        end of the arguments value: one alternative per tool."""
        alts = []
        for i, tool in enumerate(tools):
            name = json.dumps(tool.name)
            name = name if open_quote else name[1:]
            body = f'{lit(name)} ws? "," ws? {lit(json.dumps(args_key))} ws? ":" ws? {self.args(i, tool)}'
            if optional_id:
                body += ' (ws? "," ws? "\\"id\\"" ws? ":" ws? ID)?'
                self.add("ID", '/"[a-zA-Z0-9]{9}"/')
            alts.append(self.add(f"named_{i}" if open_quote else f"rest_{i}", body))
        return "(" + " | ".join(alts) + ")"

    def grammar(self, start: str) -> Grammar:
        src = "\n".join([f"start: {start}", *self._rules]) + "\n"
        return Grammar.from_lark(src, param="tools")


def marked_plan(rules: LarkRules, body: str, opener: str, special: Special, forced: bool) -> ToolPlan:
    """The plan for a format whose calls follow the marker `opener`: `body` is the
    grammar after it. Forced (tool_choice required/named): the marker and `body` from
    the first token. Otherwise lazy, triggered by the marker's special token when the
    model has one (so the same text quoted in prose never triggers), else by its text."""
    if forced:
        return ToolPlan(rules.grammar(f"{marker(opener, special)} {body}"), immediate=True)
    token = special(opener)
    if token is not None:
        return ToolPlan(rules.grammar(body), trigger_tokens=frozenset({token}))
    return ToolPlan(rules.grammar(body), trigger_text=opener)


def think_first(
    plan: ToolPlan,
    markers: ReasoningMarkers,
    *,
    started: bool,
    special: Special,
    open_tokens: Sequence[int] = (),
) -> ToolPlan:
    """An immediate `plan` that lets a reasoning model think before its calls.

    Without this a forced tool choice would stop a reasoning model from thinking, and
    when the prompt already opened the think block (`started`) the calls would land
    inside it, where the reasoning parser never hands them to the tool parser. With it:
    `started` -> free reasoning, the close marker, then the calls; otherwise an optional
    whole think block first (for harmony, the analysis message and the start of the
    next one). Lazy plans are returned unchanged: their trigger comes after any thinking.
    `open_tokens`: the open marker as the model's own tokens; when given, the block opens
    with exactly those, so the engine, which follows a block by its tokens, sees it open
    and its thinking budget applies (Gemma 4's `<|channel>thought` is a special token and
    a word the grammar could otherwise spell in any of several tokenizations).
    """
    if not plan.immediate:
        return plan
    close = special(markers.close_tag)
    # Free text ending at the real close token, or (lazy rule) at the first close tag.
    think = f"/(?s:.*)/ <[{close}]>" if close is not None else "think_text"
    if markers.resume:
        think += " " + seq(markers.resume, special)
    opener = " ".join(f"<[{t}]>" for t in open_tokens) if open_tokens else seq(markers.open_tag, special)
    block = think if started else f"{opener} {think}"
    lark = plan.grammar.lark.replace("start:", "tool_calls:", 1)
    rules = [f"start: {block} ws? tool_calls" if started else f"start: ({block} ws?)? tool_calls", lark]
    if close is None:
        rules.append(f"think_text[lazy]: /(?s:.*){regex_text(markers.close_tag)}/")
    return ToolPlan(Grammar.from_lark("\n".join(rules), param="tools"), immediate=True)
