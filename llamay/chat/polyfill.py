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
- `null_calls`: a template that writes a turn's calls only when its content is null (DeepSeek
  R1 Distill Llama's `content is none` branch; it drops them for "", which Ollama's clients
  always send) gets such a turn with content null, its text (if any) in an assistant turn of
  its own just before;
- `tools_absent`: with no tools the template gets None, or [] when it fails on None;
- `describe_tools`: a template that writes every tool's and parameter's `description` (Command
  R+ concatenates them) gets "" where the request gives none (OpenAI makes both optional);
- `object_arguments`: a call's `arguments` go in as an object when the template writes the
  object's JSON (it `tojson`s it), else as the JSON text (it concatenates a string);
- `system_role`: without one, a system message is folded into the first user turn (its text,
  a blank line, the user's text), as llama.cpp does; dropped when no user turn follows;
- `merge_turns`: a template that demands strict user/assistant alternation gets consecutive
  user turns (or assistant turns without calls) joined by a blank line;
- `bridge_tool_user`: a template that refuses a user turn right after a tool result gets an
  assistant turn between them (the model's turn after the results, with nothing said: empty,
  or one space for templates that refuse an empty turn);
- `call_ids`: a template that accepts only nine-letter alphanumeric call ids (Mistral's) gets
  every call id rewritten to one (kept when it already is one, else derived from it, or
  numbered when the client sent none, as Ollama's clients do), and each tool result the id of
  its call (by `tool_call_id`, else the next call not yet answered);
- `variables`: template variables some templates read that no caller passes: `functions`
  (the tools as indented JSON, Firefunction), `datetime` and `date_string` (llama.cpp's).

Typed content parts are flattened to text for every template in `normalize_messages`, and
wrapped back into one text part for templates that only read parts (`ChatTemplate`).
"""

from __future__ import annotations

import hashlib
import json
import re
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
    describe_tools: bool = False
    call_ids: bool = False
    null_calls: bool = False

    def describe(self) -> list[str]:
        """The polyfills in force, as short phrases (for docs and `llamay show`)."""
        out = []
        if self.null_content != "keep":
            out.append(f"content null -> {'empty string' if self.null_content == 'empty' else 'omitted'}")
        if self.null_calls:
            out.append("calls given with content null (any text in a turn before)")
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
        if self.call_ids:
            out.append("call ids -> nine alphanumerics")
        if self.describe_tools:
            out.append("missing tool and parameter descriptions -> empty")
        out += [f"`{v}` provided" for v in sorted(self.variables)]
        return out

    def tools(self, tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]] | None:
        """The `tools` variable to pass: None when absent, unless the template needs []."""
        if tools:
            return [_described(t) for t in tools] if self.describe_tools else list(tools)
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
        if self.null_calls:
            out = _null_calls(out)
        if self.call_ids:
            out = _nine_ids(out)
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


def _null_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls") and m.get("content") is not None:
            text = _text(m).strip()
            if text:
                out.append({k: v for k, v in m.items() if k != "tool_calls"})
            m = {**m, "content": None}
        out.append(m)
    return out


def _string_arguments(call: Any) -> Any:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        return call
    function = dict(call["function"])
    if not isinstance(function.get("arguments"), str):
        function["arguments"] = json.dumps(function.get("arguments", {}), ensure_ascii=False)
    return {**call, "function": function}


def _described(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """`tool` with "" for a missing description of the function and of each top-level
    parameter (new dicts where anything is filled in)."""
    function = tool.get("function")
    if not isinstance(function, Mapping):
        return tool
    function = {"description": "", **function}
    params = function.get("parameters")
    if isinstance(params, Mapping) and isinstance(params.get("properties"), Mapping):
        props = {
            k: ({"description": "", **v} if isinstance(v, Mapping) else v)
            for k, v in params["properties"].items()
        }
        function["parameters"] = {**params, "properties": props}
    return {**tool, "function": function}


_NINE = re.compile(r"[A-Za-z0-9]{9}")


def _nine(call_id: Any, number: int) -> str:
    """A nine-letter alphanumeric id for `call_id`: itself when it is one, else derived
    from it (the same id always maps alike), else `call` and the call's number."""
    if isinstance(call_id, str) and _NINE.fullmatch(call_id):
        return call_id
    if isinstance(call_id, str) and call_id:
        return hashlib.sha256(call_id.encode()).hexdigest()[:9]
    return f"call{number:05d}"[-9:]


def _nine_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ids: dict[str, str] = {}
    unanswered: list[str] = []
    number = 0
    out: list[dict[str, Any]] = []
    for m in messages:
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and isinstance(calls, list):
            renamed = []
            for call in calls:
                if not isinstance(call, Mapping):
                    renamed.append(call)
                    continue
                number += 1
                new = _nine(call.get("id"), number)
                if isinstance(call.get("id"), str):
                    ids[call["id"]] = new
                unanswered.append(new)
                renamed.append({**call, "id": new})
            m = {**m, "tool_calls": renamed}
        elif m.get("role") == "tool":
            given = m.get("tool_call_id")
            answer: str | None = ids.get(given) if isinstance(given, str) else None
            if answer is None and isinstance(given, str) and given:
                answer = _nine(given, 0)
            if answer is None:
                answer = unanswered[0] if unanswered else _nine(None, number + 1)
            if answer in unanswered:
                unanswered.remove(answer)
            m = {**m, "tool_call_id": answer}
        out.append(m)
    return out


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


def _long_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with the probe's call id spelled as OpenAI's clients spell theirs."""
    text = json.dumps(messages).replace("call00001", "call_probe_0001")
    loaded: list[dict[str, Any]] = json.loads(text)
    return loaded


def _bare(tool: Mapping[str, Any]) -> dict[str, Any]:
    """`tool` without any description (both are optional in the OpenAI API)."""
    function = {k: v for k, v in tool["function"].items() if k != "description"}
    params = dict(function["parameters"])
    params["properties"] = {
        k: {kk: vv for kk, vv in v.items() if kk != "description"} for k, v in params["properties"].items()
    }
    function["parameters"] = params
    return {**tool, "function": function}


class _Prober:
    def __init__(self, render: Render, variables: frozenset[str]) -> None:
        self.render = render
        self.variables = variables
        self.tools_absent = "none"
        self.describe_tools = False

    def attempt(
        self, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None, *, raw: bool = False
    ) -> str | None:
        """The template's text for `messages` (None when it fails); `raw`: `tools` as given."""
        needs = TemplateNeeds(
            tools_absent=self.tools_absent, variables=self.variables, describe_tools=self.describe_tools
        )
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
    bare = _bare(_TOOL)
    describe_tools = p.attempt(user, [bare]) is None and p.attempt(user, tools) is not None
    p.describe_tools = describe_tools

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

    # A call shown with content null but not with "" (nor without content).
    null_calls = (
        null_content == "keep"
        and shows(object_arguments, "keep")
        and forms[object_arguments, "empty"] is not None
        and not shows(object_arguments, "empty")
    )

    system = p.attempt([{"role": "system", "content": _SYSTEM}, *user], None)
    system_role = system is not None and _SYSTEM in system

    two_users = [*user, {"role": "user", "content": "Another message"}]
    merge_turns = p.attempt(two_users, None) is None and p.attempt(user, None) is not None

    after_tool = _history(None, args)[:3] + [{"role": "user", "content": "User message"}]
    base = TemplateNeeds(
        null_content, p.tools_absent, object_arguments, system_role, merge_turns, None, wanted, describe_tools
    )
    history = base.apply(_history(None, args))
    if p.attempt(history, tools) is not None and p.attempt(_long_ids(history), tools) is None:
        base = replace(base, call_ids=True)
    bridge = None
    if p.attempt(base.apply(after_tool), tools) is None:
        # The shortest assistant turn the template accepts: empty, else one space (some
        # templates refuse an assistant turn with nothing in it).
        for text in ("", " "):
            if p.attempt(replace(base, bridge_tool_user=text).apply(after_tool), tools) is not None:
                bridge = text
                break
    return replace(base, bridge_tool_user=bridge, null_calls=null_calls)
