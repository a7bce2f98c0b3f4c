"""Chat template rendering, compatible with how Hugging Face transformers and llama.cpp render
a model's `tokenizer.chat_template` (Jinja2).

Templates get the same environment as HF's `apply_chat_template`: a Jinja2
`ImmutableSandboxedEnvironment` with `trim_blocks`/`lstrip_blocks`, the `loopcontrols`
extension (`{% break %}`, `{% continue %}`), a no-op `{% generation %}` block, the globals
`raise_exception(msg)` and `strftime_now(fmt)`, a `tojson` filter that does not HTML-escape,
takes `indent`/`separators`/`sort_keys`/`ensure_ascii` (default False) and writes what a
filter chain yields (`tools | map(attribute='function') | tojson`) as a list, and the variables
`messages`, `add_generation_prompt`, `tools` (None when absent), `documents` (None),
`bos_token`, `eos_token` plus any extra keyword (`enable_thinking`, ...).

The sandbox is HF's (no attribute starting with an underscore, no mutation of the values a
template is given) but for `append`, `extend`, `insert` and `pop` on a list the template
made itself, which templates use to keep a queue (Kimi K2's queue of call ids), as
llama.cpp's renderer allows. The lists a render is given (messages, tools, every list
inside them) stay immutable: a template cannot change a request's tool specs or a probe's.

Every failure while rendering is the caller's messages meeting the model's template, so it
becomes `InvalidRequest` (HTTP 400), never a 500. A template that does not compile is a
model/config problem and raises `ValueError` at load.

Rendering has a budget, since a template's loops run over what the caller sent: at most
MAX_RENDER_CHARS characters of output and RENDER_SECONDS of work (checked at every piece
of output and every attribute, item or call the template evaluates); past either it is a
400 saying which.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from jinja2 import TemplateError, TemplateSyntaxError, Undefined, meta, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from ..errors import InvalidRequest, LlamayError
from .polyfill import TemplateNeeds, detect_needs

__all__ = ["CHATML_TEMPLATE", "ChatTemplate", "normalize_messages"]

# Same shape as llama.cpp's built-in fallback. `or ''` keeps an assistant turn whose content
# is None (it only carried tool calls) from failing the string concatenation.
CHATML_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}"
)

# Content part types we recognise but cannot feed to a text-only model, with the noun used in
# the error message.
_MEDIA_PARTS = {
    "image_url": "images",
    "input_image": "images",
    "image": "images",
    "input_audio": "audio inputs",
    "audio": "audio inputs",
    "file": "files",
    "input_file": "files",
}

_PROBE = "llamay-template-probe"
MAX_RENDER_CHARS = 4_000_000
RENDER_SECONDS = 10.0
# The deadline of the render running on this thread (renders run on many threads at once).
_deadline = threading.local()
# The ids of the lists the render running on this thread was given (see _Sandbox).
_given = threading.local()


class _OverBudget(Exception):
    """A render went past its time budget."""


def _check_deadline() -> None:
    until = getattr(_deadline, "at", None)
    if until is not None and time.monotonic() > until:
        raise _OverBudget()


class _TemplateRaised(TemplateError):
    """Raised by the template's own `raise_exception(msg)`; kept apart from jinja's errors so
    its message reaches the client verbatim."""


_LIST_MUTATORS = frozenset({"append", "extend", "insert", "pop"})


class _Sandbox(ImmutableSandboxedEnvironment):
    # Jinja's sandbox answers an unsafe attribute (`''.__class__`) with an Undefined that only
    # fails when used further, so `{{ x.__class__ }}` renders as "". Fail at the access
    # instead: no legitimate chat template touches such attributes.
    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:  # type: ignore[override]
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    # Every attribute, item and call goes through these: a loop that emits nothing still
    # meets the deadline here.
    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if attr in _LIST_MUTATORS and type(obj) is list:
            return id(obj) not in getattr(_given, "lists", ())
        return super().is_safe_attribute(obj, attr, value)

    def getattr(self, obj: Any, attribute: str) -> Any:
        _check_deadline()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _check_deadline()
        return super().getitem(obj, argument)

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        _check_deadline()
        return super().call(__context, __obj, *args, **kwargs)


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}`: HF uses it to mark assistant spans for
    training masks. Inference only needs the body, so it renders unchanged."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message: Any) -> NoReturn:
    raise _TemplateRaised(str(message))


def _strftime_now(fmt: str) -> str:
    # Local time, as HF and llama.cpp do; templates use it for "Today Date: ..." lines.
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson HTML-escapes (<, >, &, ') and sorts keys; templates expect plain
    # json.dumps output, which is what HF substitutes.
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
        default=_jsonable,
    )


def _jsonable(value: Any) -> Any:
    """What json.dumps cannot write itself: a filter chain's generator (`map`, `select`)
    or a mapping view is written as the list (or object) it yields, as minja does. An
    undefined value stays an error (the `describe_tools` polyfill fills what it names)."""
    if isinstance(value, Undefined):
        raise TypeError("Object of type Undefined is not JSON serializable")
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _list_ids(values: Iterable[Any]) -> frozenset[int]:
    """The ids of every list in `values` and in the lists, tuples and mappings inside them."""
    lists: set[int] = set()
    seen: set[int] = set()
    stack = list(values)
    while stack:
        value = stack.pop()
        if not isinstance(value, list | tuple | Mapping) or id(value) in seen:
            continue
        seen.add(id(value))
        if type(value) is list:
            lists.add(id(value))
        stack.extend(value.values() if isinstance(value, Mapping) else value)
    return frozenset(lists)


def _build_environment() -> _Sandbox:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, _GenerationBlock])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled chat template.

    Compiled once at construction (raises `ValueError` if the source does not compile);
    `render` may be called concurrently from many threads.
    """

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        self._source = source
        # True only for the generic ChatML stand-in of a model that ships no template.
        self.fallback = False
        self._bos_token = bos_token
        self._eos_token = eos_token
        env = _build_environment()
        try:
            self._template = env.from_string(source)
            variables = frozenset(meta.find_undeclared_variables(env.parse(source)))
        except TemplateSyntaxError as e:
            raise ValueError(f"chat template does not compile (line {e.lineno}): {e.message}") from e
        self._variables = variables
        self._typed_content = False
        self._needs = TemplateNeeds()
        self._typed_content = self._requires_typed_content()
        self._needs = detect_needs(self._probe, variables)

    @classmethod
    def chatml(cls) -> ChatTemplate:
        """The generic ChatML template, for models that ship none (`fallback` is True)."""
        template = cls(CHATML_TEMPLATE)
        template.fallback = True
        return template

    @classmethod
    def from_file(cls, path: str | Path, *, bos_token: str = "", eos_token: str = "") -> ChatTemplate:
        """Load a Jinja template file (like llama.cpp's `--chat-template-file`); an unreadable
        file raises `ValueError`, like a template that does not compile."""
        try:
            source = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read chat template file {str(path)!r}: {e}") from e
        return cls(source, bos_token=bos_token, eos_token=eos_token)

    @property
    def needs(self) -> TemplateNeeds:
        """The polyfills this template gets (probed at construction; see `chat.polyfill`)."""
        return self._needs

    @property
    def variables(self) -> frozenset[str]:
        """The names the template reads without defining them (`tools`, `enable_thinking`,
        `reasoning_effort`, ...)."""
        return self._variables

    @property
    def source(self) -> str:
        """The template text as given."""
        return self._source

    @property
    def bos_token(self) -> str:
        """BOS text given to the template as `bos_token`."""
        return self._bos_token

    @property
    def eos_token(self) -> str:
        """EOS text given to the template as `eos_token`."""
        return self._eos_token

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """Render `messages` (OpenAI-shaped; passed through `normalize_messages` first, which is
        idempotent) into prompt text.

        `tools` empty or None both reach the template as None (llama.cpp does the same; some
        templates test `tools is not none`), or as [] for a template that fails on None. The
        messages then get the template's polyfills (`needs`, see `chat.polyfill`). A template
        that only reads list-of-parts content (detected at load, as llama.cpp does) gets string
        content as one text part. `extra` becomes further template variables and may override
        `bos_token`/`eos_token`/`documents` and the polyfills' variables.
        The result may start with the BOS text: see `strip_bos_eos` before tokenizing. Raises
        `InvalidRequest` for `raise_exception` calls ("chat template: <msg>"), sandbox
        violations and any other rendering error.
        """
        normalized = self._needs.apply(normalize_messages(messages))
        variables = {**self._needs.extra(tools), **extra}
        try:
            return self._render(
                self._typed(normalized), add_generation_prompt, self._needs.tools(tools), variables
            )
        except LlamayError:
            raise
        except _TemplateRaised as e:
            raise InvalidRequest(f"chat template: {e.message}", param="messages") from e
        except SecurityError as e:
            raise InvalidRequest(f"chat template attempted an unsafe operation: {e}", param="messages") from e
        except RecursionError as e:
            raise InvalidRequest("chat template recursed too deeply", param="messages") from e
        except _OverBudget as e:
            raise InvalidRequest(
                f"chat template took longer than {RENDER_SECONDS:g}s on these messages", param="messages"
            ) from e
        except Exception as e:  # template code can raise anything (TypeError, KeyError, ...)
            detail = e.message if isinstance(e, TemplateError) else str(e)
            raise InvalidRequest(
                f"chat template failed on these messages: {type(e).__name__}: {detail}", param="messages"
            ) from e

    def strip_bos_eos(self, rendered: str, *, add_bos: bool, add_eos: bool = False) -> str:
        """Drop a leading BOS text when the tokenizer will add BOS itself (`add_bos`), and a
        trailing EOS text when it adds EOS, so neither appears twice. This is what llama.cpp
        does after rendering; call it only with the vocabulary's own add_bos/add_eos flags
        (a model may use the same text as BOS and as a turn marker, e.g. SmolLM2's
        `<|im_start|>` with add_bos false, where stripping would corrupt the prompt)."""
        if add_bos and self._bos_token and rendered.startswith(self._bos_token):
            rendered = rendered[len(self._bos_token) :]
        if add_eos and self._eos_token and rendered.endswith(self._eos_token):
            rendered = rendered[: -len(self._eos_token)]
        return rendered

    def _render(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool,
        tools: list[Mapping[str, Any]] | None,
        extra: Mapping[str, Any],
    ) -> str:
        variables: dict[str, Any] = {
            "bos_token": self._bos_token,
            "eos_token": self._eos_token,
            "documents": None,
            **extra,
            "messages": messages,
            "tools": tools,
            "add_generation_prompt": add_generation_prompt,
        }
        out: list[str] = []
        size = 0
        outer = getattr(_deadline, "at", None)  # a probe render inside another keeps its deadline
        _deadline.at = time.monotonic() + RENDER_SECONDS if outer is None else outer
        outer_lists: frozenset[int] = getattr(_given, "lists", frozenset())
        _given.lists = outer_lists | _list_ids(variables.values())
        try:
            for piece in self._template.generate(variables):
                size += len(piece)
                if size > MAX_RENDER_CHARS:
                    raise InvalidRequest(
                        f"the chat template renders these messages to more than {MAX_RENDER_CHARS} characters",
                        param="messages",
                    )
                _check_deadline()
                out.append(piece)
        finally:
            _deadline.at = outer
            _given.lists = outer_lists
        return "".join(out)

    def _typed(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self._typed_content:
            return messages
        return [
            {**m, "content": [{"type": "text", "text": m["content"]}]}
            if isinstance(m.get("content"), str)
            else m
            for m in messages
        ]

    def _probe(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        extra: Mapping[str, Any],
    ) -> str:
        return self._render(self._typed(messages), True, list(tools) if tools is not None else None, extra)

    def _requires_typed_content(self) -> bool:
        # A few templates only read content as a list of {"type": "text"} parts. Detect them
        # like llama.cpp (minja) does: a string probe vanishes, a typed probe shows up.
        def shows(content: Any) -> bool:
            try:
                out = self._render([{"role": "user", "content": content}], False, None, {})
            except Exception:
                return False
            return _PROBE in out

        return not shows(_PROBE) and shows([{"type": "text", "text": _PROBE}])


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Turn OpenAI chat messages into what chat templates expect; returns new dicts and never
    mutates the input. Idempotent.

    - content given as a list of parts becomes one string: text parts joined the way
      llama.cpp joins them (a "\\n" before each part once some text has accumulated);
    - content None, missing or an empty list becomes "" except for an assistant message
      with tool calls, where it stays None (OpenAI's shape, which templates check for);
    - empty or null `tool_calls` are dropped (some templates reject an empty list), and so is
      every other field whose value is null (`thinking`, `name`, ...), except `content`;
    - a tool call's `function.arguments` given as a JSON string encoding an object is parsed
      into a dict (HF templates `tojson` it); any other string is kept as it is;
    - image, audio and file parts raise `InvalidRequest`: models served here read text only.

    Roles are not checked beyond being strings: the template decides what it accepts.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidRequest("messages must be a list of message objects", param="messages")
    return [_normalize_message(i, m) for i, m in enumerate(messages)]


def _normalize_message(index: int, message: Any) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise InvalidRequest(f"{where} must be an object", param=where)
    # A null field is an absent one in the OpenAI API; templates test presence (gpt-oss's
    # `"thinking" in message` then reads it as text), so only `content` keeps its null.
    out = {k: v for k, v in message.items() if v is not None or k == "content"}
    if not isinstance(out.get("role"), str):
        raise InvalidRequest(f"{where}.role must be a string", param=f"{where}.role")

    tool_calls = out.get("tool_calls")
    if tool_calls:
        if isinstance(tool_calls, str | bytes | Mapping) or not isinstance(tool_calls, Sequence):
            raise InvalidRequest(f"{where}.tool_calls must be a list", param=f"{where}.tool_calls")
        out["tool_calls"] = [
            _normalize_tool_call(f"{where}.tool_calls[{j}]", c) for j, c in enumerate(tool_calls)
        ]
    else:
        out.pop("tool_calls", None)

    content = out.get("content")
    if isinstance(content, str):
        pass
    elif content is None or (
        isinstance(content, Sequence) and not isinstance(content, bytes) and not content
    ):
        out["content"] = None if out["role"] == "assistant" and "tool_calls" in out else ""
    elif isinstance(content, Sequence) and not isinstance(content, bytes):
        out["content"] = _join_parts(f"{where}.content", content)
    else:
        raise InvalidRequest(
            f"{where}.content must be a string or a list of content parts", param=f"{where}.content"
        )
    return out


def _join_parts(where: str, parts: Sequence[Any]) -> str:
    text = ""
    for k, part in enumerate(parts):
        if not isinstance(part, Mapping):
            raise InvalidRequest(f"{where}[{k}] must be a content part object", param=f"{where}[{k}]")
        kind = part.get("type")
        if kind in _MEDIA_PARTS:
            raise InvalidRequest(
                f"{where}[{k}]: {_MEDIA_PARTS[kind]} are not supported by this model", param=where
            )
        if kind != "text":
            raise InvalidRequest(
                f"{where}[{k}]: unsupported content part type {kind!r}", param=f"{where}[{k}]"
            )
        piece = part.get("text")
        if not isinstance(piece, str):
            raise InvalidRequest(f"{where}[{k}].text must be a string", param=f"{where}[{k}].text")
        # llama.cpp's rule, kept exactly so prompts match: separator only once text exists.
        if text:
            text += "\n"
        text += piece
    return text


def _normalize_tool_call(where: str, call: Any) -> Any:
    if not isinstance(call, Mapping):
        raise InvalidRequest(f"{where} must be an object", param=where)
    out = dict(call)
    function = out.get("function")
    if isinstance(function, Mapping):
        function = dict(function)
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments)
            except ValueError:
                parsed = None
            except RecursionError as e:
                raise InvalidRequest(
                    f"{where}.function.arguments nests too deeply", param=f"{where}.function.arguments"
                ) from e
            if isinstance(parsed, dict):
                function["arguments"] = parsed
        out["function"] = function
    return out
