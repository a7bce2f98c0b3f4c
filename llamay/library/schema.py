"""Output types -> JSON schemas whose property order is generation order, and answers back
into values of the type.

Anything Pydantic's `TypeAdapter` understands works: Pydantic models, dataclasses,
TypedDicts, `Literal`, `Enum`, plain and generic types (`int`, `list[int]`,
`dict[str, float]`, `tuple[str, int]`, unions). A dict is taken as a JSON schema as it is
and its answers are decoded JSON, unchecked beyond what the grammar enforced.
"""

from __future__ import annotations

import json
import sys
import typing
from dataclasses import dataclass
from functools import cached_property
from types import GenericAlias, UnionType
from typing import Any

from ..errors import InvalidRequest

__all__ = ["OutputSpec", "output_spec", "strip_titles", "compatible_type"]

# Keywords whose value is one subschema, a list of them, or a map of name -> subschema.
_ONE = ("items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames",
        "unevaluatedItems", "unevaluatedProperties", "additionalItems")  # fmt: skip
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")


def strip_titles(schema: Any) -> Any:
    """A copy of `schema` without `title` annotations, which Pydantic adds to every
    model and field: they change nothing a grammar enforces but cost prompt tokens where
    a schema is shown to the model (tools). A property *named* "title" stays."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _ONE:
            out[key] = strip_titles(value)
        elif key in _MANY and isinstance(value, list):
            out[key] = [strip_titles(v) for v in value]
        elif key in _MAP and isinstance(value, dict):
            out[key] = {k: strip_titles(v) for k, v in value.items()}
        else:
            out[key] = value
    return out


def compatible_type(tp: Any) -> Any:
    """`tp` with every `typing.TypedDict` rebuilt as `typing_extensions.TypedDict`, which
    Pydantic requires before Python 3.12; generic arguments are rebuilt recursively. Other
    types come back unchanged."""
    if sys.version_info >= (3, 12):
        return tp
    import typing_extensions as te

    if _plain_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        required = getattr(tp, "__required_keys__", frozenset(hints))
        fields = {k: compatible_type(v) if k in required else te.NotRequired[compatible_type(v)]
                  for k, v in hints.items()}  # fmt: skip
        made: Any = te.TypedDict(tp.__name__, fields)  # type: ignore[operator,misc]
        made.__doc__ = tp.__doc__
        return made
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is None or not args or origin is typing.Literal:
        return tp
    if origin is typing.Annotated:
        return typing.Annotated[(compatible_type(args[0]), *tp.__metadata__)]  # type: ignore[attr-defined]
    new = tuple(compatible_type(a) for a in args)
    if new == args:
        return tp
    if origin is typing.Union or origin is UnionType:
        return typing.Union[new]  # noqa: UP007 - rebuilt from a tuple of arguments
    if isinstance(tp, GenericAlias):
        return GenericAlias(origin, new)
    return tp.copy_with(new)


def _plain_typeddict(tp: Any) -> bool:
    """A class made with `typing.TypedDict` (not typing_extensions'), before 3.12."""
    return isinstance(tp, type) and type(tp).__module__ == "typing" and hasattr(tp, "__required_keys__")


@dataclass(frozen=True)
class OutputSpec:
    """What `output=` asked for: the JSON schema the answer is generated under, and how
    to turn the answer into a value (`parse`). Build with `output_spec`."""

    target: Any
    schema: dict[str, Any]
    name: str

    @cached_property
    def _adapter(self) -> Any:
        from pydantic import TypeAdapter

        return None if isinstance(self.target, dict) else TypeAdapter(compatible_type(self.target))

    def parse(self, text: str) -> Any:
        """The answer as a value of the type; ValueError (Pydantic's ValidationError is
        one) when it is not valid JSON or fails the type's validation."""
        if self._adapter is None:
            return json.loads(text)
        return self._adapter.validate_json(text)

    @cached_property
    def grammar(self) -> Any:
        """The constraint (compiled once per spec). Strict first: a keyword that cannot be
        enforced while sampling (`uniqueItems` from a `set`, say) is then dropped instead,
        and `parse` validates the answer against the whole type afterwards."""
        from ..errors import GrammarError
        from ..grammar import Grammar

        # The server's defaults for response_format (api/jsonformat): indented JSON, which a
        # small model extracts best in, and no keys the schema does not name.
        try:
            return Grammar.from_json_schema(
                self.schema, strict=True, param="output", layout="indented", shape="tight"
            )
        except GrammarError:
            return Grammar.from_json_schema(
                self.schema, strict=False, param="output", layout="indented", shape="tight"
            )


def output_spec(target: Any) -> OutputSpec:
    """The OutputSpec of a type (or of a JSON schema dict). InvalidRequest when Pydantic
    cannot describe the type as a JSON schema."""
    if isinstance(target, OutputSpec):
        return target
    if isinstance(target, dict):
        return OutputSpec(target, target, str(target.get("title") or "output"))
    from pydantic import TypeAdapter
    from pydantic.errors import PydanticUserError

    try:
        # Validation mode: the schema of what the type accepts, with fields in declaration order.
        schema = TypeAdapter(compatible_type(target)).json_schema(mode="validation")
    except (PydanticUserError, TypeError, ValueError) as exc:
        raise InvalidRequest(f"output type {target!r} has no JSON schema: {exc}", param="output") from None
    name = getattr(target, "__name__", None) or "output"
    return OutputSpec(target, strip_titles(schema), name)
