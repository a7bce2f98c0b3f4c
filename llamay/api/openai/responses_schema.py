"""POST /v1/responses bodies parsed into a typed record. Every bad field is a 400 naming
it; a field this server cannot honour (hosted tools other than `file_search`, background
runs, conversations) is refused rather than ignored, because ignoring it would change what
the caller gets.

Input items become two things: chat messages for the model's template, and the items as
the Responses API lists them (`GET /v1/responses/{id}/input_items`), each with an id."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...chat.tools import parse_tool_choice, parse_tools
from ...chat.tools.spec import MAX_TOOLS, ToolChoice, ToolSpec
from ...errors import InvalidRequest, LlamayError, Unsupported
from ...grammar import Grammar
from ...types import SamplingParams
from ..fields import Fields
from ..jsonformat import json_object, json_style, schema_grammar
from .responses_search import FileSearch, parse_call_item, parse_file_search, render_results

__all__ = [
    "ResponsesRequest",
    "parse_responses",
    "conversation_messages",
    "item_id",
    "EFFORTS",
    "SUMMARIES",
    "MAX_INPUT_ITEMS",
]

MAX_INPUT_ITEMS = 4096
MAX_METADATA = 16  # OpenAI's limits: 16 pairs, keys of 64 and values of 512 characters
ID_BYTES = 256  # an item id or previous_response_id given by the caller (stored as given)
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
SUMMARIES = ("auto", "concise", "detailed")
ROLES = ("user", "assistant", "system", "developer")
# Accepted and ignored: they name the caller or tune OpenAI's own caching and billing.
IGNORED = ("user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier")
# Accepted only at the value that changes nothing here.
OFF_VALUES: dict[str, Any] = {"background": False}
# `include` values with a meaning here (the others are refused by name):
INCLUDES = {
    # each output_text part's tokens with their log-probs (and `top_logprobs` alternatives)
    "message.output_text.logprobs",
    # reasoning is not encrypted here: reasoning items carry their text, and come back as
    # input as they are, so there is nothing more to include
    "reasoning.encrypted_content",
    # the passages a `file_search` tool found, on its file_search_call item (else null)
    "file_search_call.results",
}
TRUNCATIONS = ("disabled", "auto")
MAX_TOP_LOGPROBS = 20
# Refused whenever set: this server has no equivalent.
REFUSED = ("conversation", "prompt", "max_tool_calls", "context_management")
KNOWN = frozenset(
    ("model", "input", "instructions", "stream", "stream_options", "tools", "tool_choice",
     "parallel_tool_calls", "text", "reasoning", "max_output_tokens", "temperature", "top_p",
     "metadata", "store", "previous_response_id", "seed", "json_layout", "schema_shape",
     "include", "truncation", "top_logprobs", *IGNORED, *OFF_VALUES, *REFUSED)
)  # fmt: skip


def item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


@dataclass(frozen=True)
class ResponsesRequest:
    """One Responses call. `items`: its input as input_items lists it (the instructions
    are not among them: they do not carry over to a later turn). `tools_json`, `tool_choice_json` and `text_json` are echoed
    back in the response object."""

    model: str
    stream: bool
    items: list[dict[str, Any]]
    instructions: str | None = None
    tools: list[ToolSpec] = field(default_factory=list)
    tools_json: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=lambda: ToolChoice("none"))
    tool_choice_json: Any = "auto"
    parallel_tool_calls: bool | None = None
    grammar: Grammar | None = None
    text_json: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    effort: str | None = None
    summary: str | None = None
    max_output_tokens: int | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    sampling_given: frozenset[str] = frozenset()
    metadata: dict[str, str] = field(default_factory=dict)
    store: bool = True
    previous_response_id: str | None = None
    include: frozenset[str] = frozenset()
    truncation: str = "disabled"  # "auto": the oldest input items make way for the context
    file_search: FileSearch | None = None

    @property
    def searching(self) -> bool:
        """Whether the turn may search the index (a `file_search` tool, tool_choice not "none")."""
        return self.file_search is not None and self.tool_choice_json != "none"

    @property
    def logprobs(self) -> bool:
        """Whether output_text parts carry their tokens' log-probs."""
        return "message.output_text.logprobs" in self.include

    @property
    def thinking(self) -> bool:
        """The model may think unless the effort is "none" (as chat's `reasoning_effort`)."""
        return self.effort != "none"


def _check_fields(f: Fields) -> None:
    for key in f.body:
        if key not in KNOWN:
            raise InvalidRequest(f"'{key}' is not a field this server supports on /v1/responses", param=key)
    for key, off in OFF_VALUES.items():
        value = f.raw(key)
        if value is not None and value != off:
            raise InvalidRequest(f"'{key}' is not supported by this server (only {off!r})", param=key)
    for key in REFUSED:
        if f.raw(key) is not None:
            raise InvalidRequest(f"'{key}' is not supported by this server", param=key)


def _include(f: Fields) -> frozenset[str]:
    raw = f.array("include")
    if raw is None:
        return frozenset()
    for i, value in enumerate(raw):
        if not isinstance(value, str):
            raise InvalidRequest(f"'include[{i}]' must be a string", param=f"include[{i}]")
        if value not in INCLUDES:
            raise Unsupported(
                f"'include[{i}]' {value!r} is not supported by this server (only {', '.join(sorted(INCLUDES))})",
                param=f"include[{i}]",
            )
    return frozenset(raw)


def parse_responses(body: Any) -> ResponsesRequest:
    f = Fields(body)
    _check_fields(f)
    include = _include(f)
    truncation = f.text("truncation", "disabled")
    if truncation not in TRUNCATIONS:
        raise InvalidRequest("'truncation' must be \"auto\" or \"disabled\"", param="truncation")
    top = f.integer("top_logprobs", 0, lo=0, hi=MAX_TOP_LOGPROBS)
    if top:  # alternatives are asked for with each token: its log-prob comes too
        include |= {"message.output_text.logprobs"}
    items = _input(f.raw("input"))
    instructions = f.text("instructions")
    tools, tools_json, file_search = _tools(f.raw("tools"))
    choice, choice_json = _tool_choice(f.raw("tool_choice"), tools, file_search is not None)
    grammar, text_json = _text(f)
    effort, summary = _reasoning(f)
    if grammar is not None and tools and choice.mode != "none":
        raise InvalidRequest(
            "'text.format' cannot constrain a reply that may call tools: give tool_choice \"none\" "
            "or no format",
            param="text.format",
        )
    previous = f.text("previous_response_id", max_bytes=ID_BYTES)
    if previous == "":
        raise InvalidRequest("'previous_response_id' must not be empty", param="previous_response_id")
    sampling = SamplingParams(
        temperature=f.number("temperature", 1.0, lo=0.0, hi=2.0),
        top_p=f.number("top_p", 1.0, lo=0.0, hi=1.0),
        seed=f.integer("seed", None),
        logprobs="message.output_text.logprobs" in include,
        top_logprobs=top,
    ).validate()
    if not items and previous is None:
        raise InvalidRequest("'input' must hold at least one item", param="input")
    return ResponsesRequest(
        model=f.text("model", "") or "",
        stream=bool(f.flag("stream", False)),
        items=items,
        instructions=instructions,
        tools=tools,
        tools_json=tools_json,
        tool_choice=choice,
        tool_choice_json=choice_json,
        parallel_tool_calls=f.flag("parallel_tool_calls", None),
        grammar=grammar,
        text_json=text_json,
        effort=effort,
        summary=summary,
        max_output_tokens=f.integer("max_output_tokens", None, lo=1),
        sampling=sampling,
        sampling_given=frozenset(k for k in ("temperature", "top_p") if f.raw(k) is not None),
        metadata=_metadata(f.obj("metadata")),
        store=bool(f.flag("store", True)),
        previous_response_id=previous,
        include=include,
        truncation=truncation,
        file_search=file_search,
    )


def _metadata(raw: Mapping[str, Any] | None) -> dict[str, str]:
    if not raw:
        return {}
    if len(raw) > MAX_METADATA:
        raise InvalidRequest(f"'metadata' may hold at most {MAX_METADATA} pairs", param="metadata")
    for key, value in raw.items():
        if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            raise InvalidRequest(
                "'metadata' maps keys of at most 64 characters to strings of at most 512", param="metadata"
            )
    return dict(raw)


# -- input ----------------------------------------------------------------------------------
def _input(raw: Any) -> list[dict[str, Any]]:
    """The input items, checked and in the shapes input_items lists (each with an id)."""
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise InvalidRequest("'input' must be a string or an array of input items", param="input")
    if len(raw) > MAX_INPUT_ITEMS:
        raise InvalidRequest(f"'input' may hold at most {MAX_INPUT_ITEMS} items", param="input")
    items: list[dict[str, Any]] = []
    for i, item in enumerate(raw):
        f = Fields(item, f"input[{i}]")
        kind = f.text("type", "message")
        if kind == "message":
            items.append(_message(f))
        elif kind == "function_call":
            items.append(_function_call(f))
        elif kind == "function_call_output":
            items.append(_call_output(f))
        elif kind == "reasoning":
            items.append(_reasoning_item(f))
        elif kind == "file_search_call":
            items.append(parse_call_item(f, item_id("fs")))
        elif kind == "item_reference":
            # resolved against the caller's stored responses by the route (`resolve`)
            items.append({"type": "item_reference", "id": f.text("id", required=True), "param": f.prefix})
        else:
            raise InvalidRequest(
                f"'input[{i}].type' {kind!r} is not supported (message, function_call, "
                "function_call_output, reasoning, file_search_call and item_reference are)",
                param=f"input[{i}].type",
            )
    return items


def conversation_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Checked input items (and output items, which have the same shapes) as chat
    messages for the model's template. Calls that follow one another, or an assistant
    message, are one assistant turn; reasoning items are left out, as templates leave out
    past reasoning. A file_search_call item's results join the user message before it
    (`render_results`); one without results adds nothing."""
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            texts = [p.get("text", p.get("refusal", "")) for p in item["content"]]
            # Several parts are joined as chat content parts are (normalize_messages).
            content: Any = texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": content})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}  # fmt: skip
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        elif kind == "file_search_call" and item.get("results") is not None:
            render_results(messages, item["results"])
    return messages


def _parts(f: Fields, role: str) -> list[str]:
    key = "content"
    raw = f.raw(key)
    if isinstance(raw, str):
        return [raw]
    if not isinstance(raw, list):
        raise InvalidRequest(
            f"'{f.name(key)}' must be a string or an array of content parts", param=f.name(key)
        )
    texts = []
    want = ("output_text", "refusal") if role == "assistant" else ("input_text",)
    for j, part in enumerate(raw):
        pf = Fields(part, f"{f.name(key)}[{j}]")
        kind = pf.text("type", required=True)
        if kind not in want:
            raise InvalidRequest(
                f"'{pf.name('type')}' {kind!r} is not supported for role {role!r} "
                f"(only {', '.join(want)}: models served here read text)",
                param=pf.name("type"),
            )
        texts.append(pf.text("refusal" if kind == "refusal" else "text", required=True))
    return texts


def _message(f: Fields) -> dict[str, Any]:
    role = f.text("role", required=True)
    if role not in ROLES:
        raise InvalidRequest(f"'{f.name('role')}' must be one of {', '.join(ROLES)}", param=f.name("role"))
    texts = _parts(f, role)
    kind = "output_text" if role == "assistant" else "input_text"
    parts = [{"type": kind, "text": t, **({"annotations": []} if role == "assistant" else {})} for t in texts]
    return {"id": f.text("id", max_bytes=ID_BYTES) or item_id("msg"), "type": "message", "role": role, "status": "completed",
            "content": parts}  # fmt: skip


def _function_call(f: Fields) -> dict[str, Any]:
    return {
        "id": f.text("id", max_bytes=ID_BYTES) or item_id("fc"),
        "type": "function_call",
        "call_id": f.text("call_id", required=True),
        "name": f.text("name", required=True),
        "arguments": f.text("arguments", required=True),
        "status": "completed",
    }


def _call_output(f: Fields) -> dict[str, Any]:
    raw = f.raw("output")
    if isinstance(raw, list):
        output = "".join(_parts(Fields({"content": raw}, f.prefix), "user"))
    elif isinstance(raw, str):
        output = raw
    else:
        raise InvalidRequest(f"'{f.name('output')}' must be a string", param=f.name("output"))
    return {"id": f.text("id", max_bytes=ID_BYTES) or item_id("fco"), "type": "function_call_output",
            "call_id": f.text("call_id", required=True), "output": output, "status": "completed"}  # fmt: skip


def _reasoning_item(f: Fields) -> dict[str, Any]:
    """A reasoning item, checked, without its text: past reasoning never reaches the prompt
    (`conversation_messages` leaves it out, as templates do), so its summary and content are
    not kept either; the item stays, empty, so input_items lists what was sent."""
    for key in ("summary", "content"):
        for j, part in enumerate(f.array(key) or []):
            Fields(part, f"{f.name(key)}[{j}]").text("text", required=True)
    return {"id": f.text("id", max_bytes=ID_BYTES) or item_id("rs"), "type": "reasoning", "summary": []}


# -- tools, text, reasoning --------------------------------------------------------------------
def _tools(raw: Any) -> tuple[list[ToolSpec], list[dict[str, Any]], FileSearch | None]:
    """The function tools (as chat's), every tool as the response echoes it, and the
    `file_search` tool if one is given (at most one)."""
    if raw is None:
        return [], [], None
    if not isinstance(raw, list):
        raise InvalidRequest("'tools' must be an array of tool objects", param="tools")
    if len(raw) > MAX_TOOLS:  # before any work per tool
        raise InvalidRequest(f"'tools' may hold at most {MAX_TOOLS} tools", param="tools")
    chat_shaped, echoed = [], []
    search: FileSearch | None = None
    for i, tool in enumerate(raw):
        tf = Fields(tool, f"tools[{i}]")
        kind = tf.text("type", required=True)
        if kind == "file_search":
            if search is not None:
                raise InvalidRequest(f"'tools[{i}]': only one file_search tool may be given", param=f"tools[{i}]")
            search = parse_file_search(tf)
            echoed.append(search.echoed)
            continue
        if kind != "function":
            raise InvalidRequest(
                f"'tools[{i}].type' {kind!r} is not supported: this server runs function tools and "
                "file_search only",
                param=f"tools[{i}].type",
            )
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        chat_shaped.append({"type": "function", "function": fn})
        echoed.append({"type": "function", "name": fn.get("name"), "description": fn.get("description"),
                       "parameters": fn.get("parameters"), "strict": fn.get("strict", True)})  # fmt: skip
    try:
        return parse_tools(chat_shaped), echoed, search
    except LlamayError as exc:  # name the field as this API spells it (no "function" level)
        exc.message = exc.message.replace(".function.", ".")
        exc.param = exc.param.replace(".function.", ".") if exc.param else exc.param
        raise


def _tool_choice(raw: Any, tools: list[ToolSpec], search: bool) -> tuple[ToolChoice, Any]:
    """The choice among function tools, and the choice as the response echoes it. With a
    file_search tool the search is the call that "required" or {"type": "file_search"}
    asks for (it runs before the model answers): the model then chooses among the
    function tools freely, if there are any."""
    if search and (raw == "required" or (isinstance(raw, Mapping) and raw.get("type") == "file_search")):
        echo = raw if raw == "required" else {"type": "file_search"}
        return parse_tool_choice("auto" if tools else "none", tools), echo
    if raw is None or isinstance(raw, str):
        return parse_tool_choice(raw, tools), raw if raw is not None else "auto"
    f = Fields(raw, "tool_choice")
    kind = f.text("type", required=True)
    if kind != "function":
        raise InvalidRequest(
            f'\'tool_choice.type\' {kind!r} is not supported ("auto", "none", "required", '
            '{"type": "function", "name": ...} or, with a file_search tool, {"type": "file_search"})',
            param="tool_choice.type",
        )
    name = f.text("name", required=True)
    return parse_tool_choice({"type": "function", "function": {"name": name}}, tools), {
        "type": "function",
        "name": name,
    }


def _text(f: Fields) -> tuple[Grammar | None, dict[str, Any]]:
    text = f.obj("text")
    if text is None:
        return None, {"format": {"type": "text"}}
    tf = Fields(text, "text")
    verbosity = tf.text("verbosity")  # a hint about length; there is nothing to tune here
    echoed: dict[str, Any] = {"verbosity": verbosity} if verbosity else {}
    fmt = tf.obj("format")
    if fmt is None:
        return None, {"format": {"type": "text"}, **echoed}
    ff = Fields(fmt, "text.format")
    kind = ff.text("type", required=True)
    style = json_style(f)
    if kind == "text":
        return None, {"format": {"type": "text"}, **echoed}
    if kind == "json_object":
        return json_object(style, param="text.format"), {"format": {"type": "json_object"}, **echoed}
    if kind != "json_schema":
        raise InvalidRequest(
            f"'text.format.type' must be one of text, json_object, json_schema (got {kind!r})",
            param="text.format.type",
        )
    name = ff.text("name", required=True)
    schema = ff.raw("schema")
    if schema is None:
        raise InvalidRequest("'text.format.schema' is required", param="text.format.schema")
    # As chat's response_format: strict refuses a keyword the grammar cannot enforce;
    # otherwise it is checked after the fact.
    strict = bool(ff.flag("strict", False))
    grammar = schema_grammar(schema, style, strict=strict, param="text.format.schema")
    out = {"type": "json_schema", "name": name, "schema": schema, "strict": strict}
    if ff.text("description") is not None:
        out["description"] = ff.text("description")
    return grammar, {"format": out, **echoed}


def _reasoning(f: Fields) -> tuple[str | None, str | None]:
    raw = f.obj("reasoning")
    if raw is None:
        return None, None
    rf = Fields(raw, "reasoning")
    effort = rf.text("effort")
    if effort is not None and effort not in EFFORTS:
        raise InvalidRequest(
            f"'reasoning.effort' must be one of {', '.join(EFFORTS)}", param="reasoning.effort"
        )
    summary = rf.text("summary") or rf.text("generate_summary")
    if summary is not None and summary not in SUMMARIES:
        raise InvalidRequest(
            f"'reasoning.summary' must be one of {', '.join(SUMMARIES)}", param="reasoning.summary"
        )
    return effort, summary
