"""Tool calls written as Python calls: LFM2's `<|tool_call_start|>[name(k=v, ...), ...]
<|tool_call_end|>`, and Llama 3.1's built-in tools (`<|python_tag|>brave_search.call(
query="...")`).

Arguments are keyword arguments with literal values (strings, numbers, True/False/None,
lists, dicts; JSON's true/false/null are read too). They are read without evaluating
anything: the text is parsed by Python's own parser and only literal nodes are
converted, to a bounded depth.
"""

from __future__ import annotations

import ast
import functools
import json
import math
from dataclasses import dataclass
from typing import Any

from ..template import normalize_messages
from .base import LarkRules, Special, TemplateFormat, ToolPlan, chosen_tools, lit, marked_plan, marker
from .block import CallSyntax
from .params import NAME_LIMIT, json_value_rule, params_rule
from .program import FAIL, NEED, BlockIO, Lit, Mismatch, Opt, Program, Until
from .spec import ToolChoice, ToolSpec, openai_tools
from .stream import ToolStreamParser

__all__ = ["MAX_DEPTH", "PyArgs", "PythonicFormat", "kwargs_json", "python_call_text"]

MAX_DEPTH = 32
_NAMES = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}


@dataclass
class PyArgs:
    """The text of a call's arguments, from after its "(" to the matching ")" (which is
    consumed): strings and brackets are followed, nesting beyond MAX_DEPTH is a
    mismatch. Each character is looked at once."""

    _pos: int = 0
    _depth: int = 0
    _quote: str = ""
    _escape: bool = False

    def step(self, buf: str, final: bool) -> tuple[int, Any]:
        while self._pos < len(buf):
            c = buf[self._pos]
            self._pos += 1
            if self._quote:
                if self._escape:
                    self._escape = False
                elif c == "\\":
                    self._escape = True
                elif c == self._quote:
                    self._quote = ""
            elif c in "\"'":
                self._quote = c
            elif c in "([{":
                self._depth += 1
                if self._depth > MAX_DEPTH:
                    return 0, FAIL
            elif c in ")]}":
                if self._depth == 0:
                    if c != ")":
                        return 0, FAIL
                    return self._pos, buf[: self._pos - 1]
                self._depth -= 1
        return 0, NEED


def kwargs_json(text: str) -> str | None:
    """The JSON object of keyword arguments `text` (the inside of a call's parentheses),
    or None when it is not keyword arguments with literal values."""
    try:
        tree = ast.parse(f"f({text})", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    call = tree.body
    if not isinstance(call, ast.Call) or call.args:
        return None
    out: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            return None
        try:
            out[kw.arg] = _literal(kw.value, 0)
        except ValueError:
            return None
    try:
        return json.dumps(out, ensure_ascii=False)
    except ValueError:  # an integer past Python's digit limit
        return None


def _literal(node: ast.AST, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ValueError("too deep")
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool | type(None)):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise ValueError("not JSON")
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand, depth + 1)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("not a number")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e, depth + 1) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values, strict=True):
            key = _literal(k, depth + 1) if k is not None else None
            if not isinstance(key, str):
                raise ValueError("keys must be strings")
            out[key] = _literal(v, depth + 1)
        return out
    raise ValueError("not a literal")


def python_call_text(name: str, arguments: Any) -> str:
    """`name(k=v, ...)` for a call of the history (values as Python literals)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return f"{name}()"
    items = arguments.items() if isinstance(arguments, dict) else []
    return f"{name}(" + ", ".join(f"{k}={_py(v, 0)}" for k, v in items) + ")"


def _py(value: Any, depth: int) -> str:
    """A JSON value as a Python literal (JSON itself below MAX_DEPTH: the template shows
    it, nothing parses it back)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if depth < MAX_DEPTH and isinstance(value, list):
        return "[" + ", ".join(_py(v, depth + 1) for v in value) + "]"
    if depth < MAX_DEPTH and isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_py(v, depth + 1)}" for k, v in value.items()) + "}"
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return "None"


OPEN, CLOSE = "<|tool_call_start|>", "<|tool_call_end|>"


def _pythonic_program(io: BlockIO, opener: str) -> Program:
    yield Lit("[")
    while True:
        start = len(io.raw)
        name, _ = yield Until(["("], NAME_LIMIT)
        inner = yield PyArgs()
        args = kwargs_json(inner)
        if args is None:
            raise Mismatch()
        call = io.call(name.strip())
        call.args(args)
        if not call.known:
            io.content(io.raw[start:].lstrip(", "))
        sep = yield Opt([",", "]"])
        if sep is None:
            raise Mismatch()
        if sep == "]":
            break
    yield Opt([CLOSE])


class PythonicFormat(TemplateFormat):
    """LFM2's Python-call lists. `render_calls`: the template does not show the history's
    calls, so they are written into the assistant text the way the model writes them."""

    name = "pythonic"

    def __init__(self, *, render_calls: bool = False) -> None:
        self.render_calls = render_calls

    def prepare(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        out = normalize_messages(messages)
        if self.render_calls:
            for i, m in enumerate(out):
                calls = m.pop("tool_calls", None) if m["role"] == "assistant" else None
                if calls:
                    texts = [
                        python_call_text(str(fn.get("name")), fn.get("arguments"))
                        for c in calls
                        if isinstance(c, dict) and isinstance(fn := c.get("function"), dict)
                    ]
                    out[i] = {
                        **m,
                        "content": (m.get("content") or "") + OPEN + "[" + ", ".join(texts) + "]" + CLOSE,
                    }
        return out, ({"tools": openai_tools(tools)} if tools else {})

    def plan(self, tools: list[ToolSpec], choice: ToolChoice, parallel: bool, special: Special) -> ToolPlan:
        rules = LarkRules()
        alts = []
        for i, tool in enumerate(chosen_tools(tools, choice)):

            def one(key: str, prop: Any, tool: ToolSpec = tool) -> str:
                # JSON values, which read as Python literals (true/false/null included).
                return f"{lit(key + '=')} {json_value_rule(prop, tool.parameters)}"

            params = params_rule(tool, one, add=rules.add, prefix=f"p{i}", separator='", "')
            alts.append(rules.add(f"call_{i}", f'{lit(tool.name + "(")} {params} ")"'))
        call = rules.add("call", "(" + " | ".join(alts) + ")")
        more = f' ("," " "? {call})*' if parallel else ""
        body = f'"[" {call}{more} "]" {marker(CLOSE, special)}'
        return marked_plan(rules, body, OPEN, special, choice.forced)

    def parser(self, tools: list[ToolSpec], finish_tool: str | None = None) -> ToolStreamParser:
        syntax = CallSyntax(openers=((OPEN, ""),), program=functools.partial(_pythonic_program))
        return ToolStreamParser(syntax, tools, finish_tool)
