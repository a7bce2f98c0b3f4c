"""`@llamay.tool`: a Python function as a tool the model may call.

The function's signature, type hints and docstring give the tool's name, description
and the JSON schema of its arguments (parameter order is property order; `Literal`,
`Enum`, Pydantic models, dataclasses and defaults work as in `output=`). Calling the
tool with the model's arguments validates them into the annotated types first.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
import sys
from collections.abc import Callable
from typing import Any, overload

from ..chat.tools import ToolSpec
from ..errors import InvalidRequest
from .schema import compatible_type, strip_titles

__all__ = ["Tool", "tool", "as_tool", "describe", "result_text"]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Section headers of Google, NumPy and Sphinx style docstrings: the description ends there.
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:?\s*$")
_OTHER_HEADER = re.compile(r"^\s*(Returns?|Raises|Yields|Examples?|Notes?|See Also)\s*:?\s*$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def describe(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) from a docstring. The description is the
    text before the first section; parameters come from a Google `Args:` section, a NumPy
    `Parameters` section or Sphinx `:param name:` lines."""
    lines = inspect.cleandoc(doc or "").splitlines()
    intro: list[str] = []
    params: dict[str, str] = {}
    section = "intro"
    current: str | None = None
    base: int | None = None  # indentation of parameter lines in an Args section
    numpy = False
    for i, line in enumerate(lines):
        if _ARGS_HEADER.match(line) or _OTHER_HEADER.match(line):
            section = "args" if _ARGS_HEADER.match(line) else "other"
            current, base = None, None
            numpy = i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}
            continue
        sphinx = _SPHINX_PARAM.match(line)
        if sphinx:
            current, section = sphinx.group(1), "sphinx"
            params[current] = sphinx.group(2).strip()
        elif line.strip().startswith(":"):  # :returns:, :raises: ... end a Sphinx parameter
            section, current = "other", None
        elif section == "intro":
            intro.append(line)
        elif section == "sphinx" and current is not None and line.strip():
            params[current] = f"{params[current]} {line.strip()}".strip()
        elif section == "args" and line.strip() and set(line.strip()) != {"-"}:
            indent = len(line) - len(line.lstrip())
            base = indent if base is None else base
            if indent <= base:
                # Google: "name (type): text"; NumPy: "name : type" with the text below.
                m = re.match(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*(?::\s*(.*))?$", line)
                current = m.group(1) if m else None
                if current is not None:
                    params[current] = "" if numpy or m is None else (m.group(2) or "").strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(intro).strip(), {k: v for k, v in params.items() if v}


class Tool:
    """A function the model may call. `spec` is what the model is shown (name,
    description, JSON schema of the arguments); `invoke` runs the function on the
    model's arguments. Calling the Tool calls the function itself, unchanged."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        localns: dict[str, Any] | None = None,
    ) -> None:
        """`localns`: names the annotations may use besides the function's module globals
        (the decorator passes its caller's locals, for classes defined in a function)."""
        functools.update_wrapper(self, fn, updated=())  # type: ignore[arg-type]
        self.fn = fn
        self.name: str = str(name or getattr(fn, "__name__", ""))
        if not _NAME.fullmatch(self.name):
            raise InvalidRequest(
                f"tool name {self.name!r} must be 1 to 64 characters from A-Z, a-z, 0-9, _ and -",
                param="tools",
            )
        summary, docs = describe(inspect.getdoc(fn))
        self.description = summary if description is None else description
        self._model = _arguments_model(fn, self.name, docs, localns)
        schema = strip_titles(self._model.model_json_schema())
        self.spec = ToolSpec(self.name, self.description, schema, strict=True)
        self.is_async = inspect.iscoroutinefunction(fn)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments object."""
        return self.spec.parameters

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def arguments(self, raw: dict[str, Any]) -> dict[str, Any]:
        """The model's arguments validated into the parameters' types (ValueError if not)."""
        validated = self._model.model_validate(raw)
        return {
            k: getattr(validated, k)
            for k in type(validated).model_fields
            if k in raw or _has_default(validated, k)
        }

    async def invoke(self, raw: dict[str, Any]) -> Any:
        """Run the function on the model's arguments. A synchronous function runs in a
        worker thread, so a slow tool does not stall other generations."""
        kwargs = self.arguments(raw)
        if self.is_async:
            return await self.fn(**kwargs)
        return await asyncio.to_thread(self.fn, **kwargs)


def _has_default(validated: Any, name: str) -> bool:
    return not type(validated).model_fields[name].is_required()


def _arguments_model(
    fn: Callable[..., Any], name: str, docs: dict[str, str], localns: dict[str, Any] | None
) -> Any:
    """A Pydantic model of `fn`'s parameters, in their order, unknown keys forbidden."""
    from pydantic import ConfigDict, Field, create_model

    try:
        sig = inspect.signature(fn)
        hints = _hints(fn, localns)
    except (TypeError, ValueError, NameError) as exc:
        raise InvalidRequest(f"tool {name!r}: cannot read its signature: {exc}", param="tools") from None
    fields: dict[str, Any] = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise InvalidRequest(
                f"tool {name!r}: *args and **kwargs cannot be described to a model", param="tools"
            )
        if p.kind is p.POSITIONAL_ONLY:
            raise InvalidRequest(f"tool {name!r}: parameter {p.name!r} is positional-only", param="tools")
        annotation = compatible_type(hints.get(p.name, Any))
        default = ... if p.default is p.empty else p.default
        fields[p.name] = (annotation, Field(default, description=docs.get(p.name)))
    try:
        return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    except Exception as exc:  # Pydantic raises several types for types it cannot handle
        raise InvalidRequest(f"tool {name!r}: {exc}", param="tools") from None


def _hints(fn: Callable[..., Any], localns: dict[str, Any] | None) -> dict[str, Any]:
    import typing

    target: Any = fn
    if not inspect.isfunction(fn) and not inspect.ismethod(fn):
        target = type(fn).__call__  # a callable object: its __call__ describes it
    return typing.get_type_hints(target, localns=localns, include_extras=True)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, description: str | None = None
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a tool: `@llamay.tool`, or `@llamay.tool(name=..., description=...)`.
    The name defaults to the function's, the description to its docstring's text before
    any `Args:` section; each parameter's description comes from that section."""
    # The caller's locals resolve annotations naming classes defined in a function.
    caller = sys._getframe(1).f_locals
    if fn is not None:
        return Tool(fn, name=name, description=description, localns=caller)
    return lambda f: Tool(f, name=name, description=description, localns=caller)


def as_tool(item: Any) -> Tool | ToolSpec:
    """What `tools=` accepts: a Tool, a plain function (made a Tool), a ToolSpec, or an
    OpenAI tool dict (`{"type": "function", "function": {...}}`: offered to the model,
    but there is nothing to run for it)."""
    if isinstance(item, Tool | ToolSpec):
        return item
    if isinstance(item, dict):
        from ..chat.tools import parse_tools

        return parse_tools([item])[0]
    if callable(item):
        return Tool(item)
    raise InvalidRequest(
        f"tools must be functions, llamay.tool objects or tool dicts, not {item!r}", param="tools"
    )


def result_text(value: Any) -> str:
    """A tool's return value as the text of a `tool` message: a string as it is, anything
    else as JSON (Pydantic models, dataclasses and the like included)."""
    if isinstance(value, str):
        return value
    from pydantic_core import to_jsonable_python

    return json.dumps(value, default=to_jsonable_python, ensure_ascii=False)
