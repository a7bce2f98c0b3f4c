"""Template polyfills: what a chat template expects that OpenAI-shaped messages do not give it.

Real templates were written against one client's habits. Qwen3's and gpt-oss's test `'x' in
message.content`, which fails on the `content: null` every OpenAI client sends with tool
calls; Hermes 3's tool-use template loops over `tools` even when there are none; DeepSeek R1's
concatenates a call's `arguments` as a string while Hermes' `tojson`s an object; Gemma 2 has no
system role; Mistral's refuse a user turn right after a tool result. llama.cpp probes each
template for what it can take (`common/jinja/caps.cpp`) and rewrites the messages to fit
(`common/chat.cpp`, `workaround::`); this is llamay's own version of that.

`detect_needs(render)` probes a template once, at load, by rendering small conversations
through it (`render(messages, tools, variables) -> text`, raising when the template does), and
`TemplateNeeds.apply` rewrites each request's messages accordingly. Nothing here looks at a
family's name; every polyfill is decided by what the template does with a probe:

- `null_content`: an assistant turn's `content: null` (tool calls only) is kept ("keep"),
  given as "" ("empty") or left out ("omit"), the first of these the template renders without
  failing or printing "None";
- `tools_absent`: with no tools the template gets None, or [] when it fails on None;
- `object_arguments`: a call's `arguments` go in as an object when the template writes the
  object's JSON (it `tojson`s it), else as the JSON text (it concatenates a string);
- `system_role`: without one, a system message is folded into the first user turn (its text,
  a blank line, the user's text), as llama.cpp does; dropped when no user turn follows;
- `merge_turns`: a template that demands strict user/assistant alternation gets consecutive
  user turns (or assistant turns without calls) joined by a blank line;
- `bridge_tool_user`: a template that refuses a user turn right after a tool result gets an
  assistant turn between them (the model's turn after the results, with nothing said: empty,
  or one space for templates that refuse an empty turn);
- `variables`: template variables some templates read that no caller passes: `functions`
  (the tools as indented JSON, Firefunction), `datetime` and `date_string` (llama.cpp's).

Typed content parts are flattened to text for every template in `normalize_messages`, and
wrapped back into one text part for templates that only read parts (`ChatTemplate`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

__all__ = ["TemplateNeeds", "detect_needs", "Render"]

Render = Callable[[list[dict[str, Any]], "Sequence[Mapping[str, Any]] | None", Mapping[str, Any]], str]
"""Render probe messages with tools and extra variables; raises when the template fails."""

_VALUE = "llamayprobevalue"
_SYSTEM = "llamay-system-probe"
_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_tool",
        "description": "Probe tool",
        "parameters": {
            "type": "object",
            "properties": {"arg": {"type": "string", "description": "Argument"}},
            "required": ["arg"],
        },
    },
}
# Variables templates read that only some servers pass (llama.cpp passes these).
KNOWN_VARIABLES = ("functions", "datetime", "date_string")


@dataclass(frozen=True)
class TemplateNeeds:
    """What one template needs (see the module docstring); the defaults change nothing."""

    null_content: str = "keep"  # keep | empty | omit
    tools_absent: str = "none"  # none | empty
    object_arguments: bool = True
    system_role: bool = True
    merge_turns: bool = False
    bridge_tool_user: str | None = None  # the bridging assistant turn's text, when one is needed
    variables: frozenset[str] = field(default_factory=frozenset)

    def describe(self) -> list[str]:
        """The polyfills in force, as short phrases (for docs and `llamay show`)."""
        out = []
        if self.null_content != "keep":
            out.append(f"content null -> {'empty string' if self.null_content == 'empty' else 'omitted'}")
        if self.tools_absent == "empty":
            out.append("no tools -> []")
        if not self.object_arguments:
            out.append("arguments as JSON text")
        if not self.system_role:
            out.append("system folded into the first user turn")
        if self.merge_turns:
            out.append("consecutive same-role turns merged")
        if self.bridge_tool_user is not None:
            said = "empty" if not self.bridge_tool_user else f"{self.bridge_tool_user!r}"
            out.append(f"assistant turn ({said}) between a tool result and a user turn")
        out += [f"`{v}` provided" for v in sorted(self.variables)]
        return out

    def tools(self, tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]] | None:
        """The `tools` variable to pass: None when absent, unless the template needs []."""
        if tools:
            return list(tools)
        return [] if self.tools_absent == "empty" else None

    def extra(self, tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
        """Values of the variables the template reads that no caller passes."""
        out: dict[str, Any] = {}
        if "functions" in self.variables:
            out["functions"] = json.dumps(list(tools), indent=2, ensure_ascii=False) if tools else ""
        now = datetime.now()
        if "datetime" in self.variables:
            out["datetime"] = now.strftime("%b %d %Y")
        if "date_string" in self.variables:
            out["date_string"] = now.strftime("%d %b %Y")
        return out

    def apply(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`messages` (normalized: string content, object arguments) rewritten for the
        template; new dicts where anything changes, the input untouched."""
        out = [self._message(m) for m in messages]
        if not self.system_role:
            out = _fold_system(out)
        if self.bridge_tool_user is not None:
            out = _bridge(out, self.bridge_tool_user)
        if self.merge_turns:
            out = _merge(out)
        return out

    def _message(self, message: dict[str, Any]) -> dict[str, Any]:
        calls = message.get("tool_calls")
        if not calls:
            return message
        out = dict(message)
        if out.get("content") is None and self.null_content != "keep":
            if self.null_content == "empty":
                out["content"] = ""
            else:
                out.pop("content", None)
        if not self.object_arguments:
            out["tool_calls"] = [_string_arguments(c) for c in calls]
        return out


def _string_arguments(call: Any) -> Any:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        return call
    function = dict(call["function"])
    if not isinstance(function.get("arguments"), str):
        function["arguments"] = json.dumps(function.get("arguments", {}), ensure_ascii=False)
    return {**call, "function": function}


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _fold_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not messages or messages[0].get("role") != "system":
        return messages
    system, rest = messages[0], messages[1:]
    for i, m in enumerate(rest):
        if m.get("role") == "user":
            rest = list(rest)
            rest[i] = {**m, "content": f"{_text(system)}\n\n{_text(m)}" if _text(system) else _text(m)}
            return rest
    return rest


def _bridge(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "user" and out and out[-1].get("role") == "tool":
            out.append({"role": "assistant", "content": text})
        out.append(m)
    return out


def _merge(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        prev = out[-1] if out else None
        role = m.get("role")
        if (
            prev is not None
            and role in ("user", "assistant")
            and prev.get("role") == role
            and not prev.get("tool_calls")
            and not m.get("tool_calls")
        ):
            joined = "\n\n".join(t for t in (_text(prev), _text(m)) if t)
            out[-1] = {**prev, "content": joined}
        else:
            out.append(m)
    return out


# -- probing ---------------------------------------------------------------------------------


def _call(arguments: Any, call_id: str = "call00001") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "probe_tool", "arguments": arguments}}


def _history(content: Any, arguments: Any, *, omit: bool = False) -> list[dict[str, Any]]:
    """llama.cpp's tool-call probe: a call, its result, an answer and a new question."""
    assistant: dict[str, Any] = {"role": "assistant", "tool_calls": [_call(arguments)]}
    if not omit:
        assistant["content"] = content
    return [
        {"role": "user", "content": "User message"},
        assistant,
        {"role": "tool", "tool_call_id": "call00001", "content": "Tool response"},
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        {"role": "user", "content": "User message"},
    ]


class _Prober:
    def __init__(self, render: Render, variables: frozenset[str]) -> None:
        self.render = render
        self.variables = variables
        self.tools_absent = "none"

    def attempt(
        self, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None, *, raw: bool = False
    ) -> str | None:
        """The template's text for `messages` (None when it fails); `raw`: `tools` as given."""
        needs = TemplateNeeds(tools_absent=self.tools_absent, variables=self.variables)
        try:
            return self.render(messages, tools if raw else needs.tools(tools), needs.extra(tools))
        except Exception:  # a probe the template refuses tells what it needs
            return None


def detect_needs(render: Render, variables: frozenset[str] = frozenset()) -> TemplateNeeds:
    """Probe a template through `render` (see `Render`); `variables` are the names the
    template reads without defining them (jinja2's `meta.find_undeclared_variables`)."""
    wanted = frozenset(v for v in KNOWN_VARIABLES if v in variables)
    p = _Prober(render, wanted)
    user = [{"role": "user", "content": "User message"}]
    if p.attempt(user, None) is None and p.attempt(user, [], raw=True) is not None:
        p.tools_absent = "empty"
    tools: list[Mapping[str, Any]] = [_TOOL]

    # Try each way of giving a call (arguments as an object or as JSON text; content null,
    # "" or left out). A way "shows" the call when the argument's value appears in the text,
    # not as a Python dict's repr and with no "None" printed for the null content.
    obj: dict[str, Any] = {"arg": _VALUE}
    forms: dict[tuple[bool, str], str | None] = {}
    for as_object in (True, False):
        given = obj if as_object else json.dumps(obj)
        for null, content, omit in (("keep", None, False), ("empty", "", False), ("omit", None, True)):
            forms[as_object, null] = p.attempt(_history(content, given, omit=omit), tools)

    def clean(as_object: bool, null: str) -> bool:
        out, empty = forms[as_object, null], forms[as_object, "empty"]
        if out is None:
            return False
        return null != "keep" or out.count("None") <= (empty.count("None") if empty is not None else 0)

    def shows(as_object: bool, null: str) -> bool:
        out = forms[as_object, null]
        return clean(as_object, null) and out is not None and _VALUE in out and repr(obj) not in out

    nulls = ("keep", "empty", "omit")
    object_arguments = any(shows(True, n) for n in nulls) or not any(shows(False, n) for n in nulls)
    args: Any = obj if object_arguments else json.dumps(obj)
    null_content = next((n for n in nulls if shows(object_arguments, n)), None)
    if null_content is None:  # no way shows the call: null if it renders cleanly, else llama.cpp's ""
        null_content = "keep" if clean(object_arguments, "keep") else "empty"

    system = p.attempt([{"role": "system", "content": _SYSTEM}, *user], None)
    system_role = system is not None and _SYSTEM in system

    two_users = [*user, {"role": "user", "content": "Another message"}]
    merge_turns = p.attempt(two_users, None) is None and p.attempt(user, None) is not None

    after_tool = _history(None, args)[:3] + [{"role": "user", "content": "User message"}]
    base = TemplateNeeds(null_content, p.tools_absent, object_arguments, system_role, merge_turns, None, wanted)
    bridge = None
    if p.attempt(base.apply(after_tool), tools) is None:
        # The shortest assistant turn the template accepts: empty, else one space (some
        # templates refuse an assistant turn with nothing in it).
        for text in ("", " "):
            if p.attempt(replace(base, bridge_tool_user=text).apply(after_tool), tools) is not None:
                bridge = text
                break
    return replace(base, bridge_tool_user=bridge)
