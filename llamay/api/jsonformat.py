"""JSON schemas on every API: how a request's schema is compiled, and how its output is
checked afterwards when part of the schema could not be enforced while sampling.

The three APIs name the schema differently (`response_format`, `output_config.format`,
`format`) but share these request fields:

- `strict` (OpenAI's `json_schema.strict`, a top-level `strict` elsewhere): with true, a
  keyword that cannot be enforced is a 400 naming it; otherwise everything enforceable is
  enforced and the finished output is validated against the whole schema (`check`).
- `json_layout`: "indented" (default: the one layout `json.dumps(value, indent=2)` writes,
  kept while sampling, see grammar/layout.py), "compact" (no whitespace) or "free" (bounded
  runs of any JSON whitespace).
- `schema_shape`: "tight" (default: an object whose schema names its properties but says
  nothing of others gets no invented keys) or "free" (everything the schema allows).

Generation may be stricter than the schema, never looser: every output of a tight,
indented grammar is still valid under the caller's schema.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from ..grammar import Grammar
from ..grammar.report import check
from .fields import Fields

__all__ = [
    "JsonStyle",
    "json_style",
    "schema_grammar",
    "check",
    "schema_check",
    "LAYOUTS",
    "SHAPES",
    "DEFAULT_LAYOUT",
]

LAYOUTS = ("compact", "indented", "free")
SHAPES = ("tight", "free")
# Measured on the default model over ten extraction cases (python -m bench.json_layout):
# indented answers got 63% of fields right against 57% for compact ones, for 34% more
# tokens (compact stopped in 9 of 10, indented in 8; both bounded by max_tokens). A small
# model extracts better in the layout it was trained to write.
DEFAULT_LAYOUT = "indented"
DEFAULT_SHAPE = "tight"


@dataclass(frozen=True)
class JsonStyle:
    """The request's `json_layout` and `schema_shape`."""

    layout: str = DEFAULT_LAYOUT
    shape: str = DEFAULT_SHAPE


def _choice(f: Fields, key: str, allowed: tuple[str, ...], default: str) -> str:
    value = f.text(key, default)
    if value not in allowed:
        raise InvalidRequest(
            f"'{f.name(key)}' must be one of {', '.join(allowed)} (got {value!r})", param=f.name(key)
        )
    return str(value)


def json_style(f: Fields) -> JsonStyle:
    """Read `json_layout` and `schema_shape` from a request body (400 on bad values)."""
    return JsonStyle(
        _choice(f, "json_layout", LAYOUTS, DEFAULT_LAYOUT), _choice(f, "schema_shape", SHAPES, DEFAULT_SHAPE)
    )


def schema_grammar(schema: Any, style: JsonStyle, *, strict: bool, param: str) -> Grammar:
    """Compile a request's JSON schema (a dict or a boolean) in the request's style."""
    if not isinstance(schema, dict | bool):
        raise InvalidRequest(f"'{param}' must be a JSON schema object", param=param)
    return Grammar.from_json_schema(
        schema,
        strict=strict,
        param=param,
        layout=style.layout,  # type: ignore[arg-type]
        shape=style.shape,  # type: ignore[arg-type]
    )


def json_object(style: JsonStyle, *, param: str) -> Grammar:
    """Any JSON object, in the request's layout (keys are free: there are no properties)."""
    return schema_grammar({"type": "object"}, style, strict=True, param=param)


async def schema_check(grammar: Grammar | None, text: str, *, complete: bool) -> dict[str, Any]:
    """`{"schema_check": report}` (see `check`) for a reply whose schema was not enforced
    in full, to merge into the reply's JSON; {} otherwise. Validates in a worker thread."""
    if grammar is None or grammar.schema is None or not grammar.unenforced:
        return {}
    return {"schema_check": await asyncio.to_thread(check, grammar, text, complete=complete)}
