"""Output layout (whitespace) and shape (extra object keys) chosen for generation.

Generation may produce a subset of the texts a schema allows, as long as each is valid.

Layouts (llguidance's `whitespace_pattern` is one regex used, at most once, at every
place JSON allows whitespace, so indentation cannot follow depth exactly):

- "compact": no whitespace at all; separators "," and ":".
- "spaced": no whitespace but the separators ", " and ": " (`json.dumps` defaults, what
  chat templates' `tojson` writes into a prompt, so tool calls look like the examples).
- "indented": each gap is empty or one newline plus up to 40 spaces; separators "," and
  ": ". `json.dumps(value, indent=k)` output matches; so do shallower indents.
- "free": any JSON whitespace in bounded runs (one optional newline, then up to 40
  spaces/tabs; see keywords.JSON_OPTIONS).

Shape "tight" closes objects the schema leaves open: an object subschema with
`properties` that says nothing about other keys gets `additionalProperties: false`, where
that cannot make a satisfiable schema unsatisfiable (see `Tightening`).
"""

from __future__ import annotations

from typing import Any, Literal

from .keywords import JSON_OPTIONS

__all__ = ["Layout", "Shape", "layout_options", "GAP_BYTES", "KEY_SEP_BYTES", "Tightening"]

Layout = Literal["compact", "spaced", "indented", "free"]
Shape = Literal["tight", "free"]

# The most bytes one whitespace gap / one key separator can take, per layout ("spaced"
# counts its item separator's space as a gap: an array or object has more gaps than items).
GAP_BYTES: dict[str, int] = {"compact": 0, "spaced": 1, "indented": 41, "free": 42}
KEY_SEP_BYTES: dict[str, int] = {"compact": 1, "spaced": 2, "indented": 2, "free": 1}


def layout_options(layout: Layout) -> dict[str, Any]:
    """The llguidance JSON options (x-guidance) for `layout`."""
    options = dict(JSON_OPTIONS)
    if layout in ("compact", "spaced"):
        del options["whitespace_pattern"]
        options["whitespace_flexible"] = False
        if layout == "spaced":
            options["item_separator"] = ", "
            options["key_separator"] = ": "
    elif layout == "indented":
        options["whitespace_pattern"] = r"\n {0,40}"
        options["key_separator"] = ": "
    elif layout != "free":
        raise ValueError(f"unknown layout {layout!r}")
    return options


# Keywords whose presence next to `properties` means the object is intersected with
# another schema that may name further keys.
_MERGING = ("allOf", "anyOf", "oneOf", "$ref", "not", "if", "dependentSchemas", "dependentRequired")
_OPEN = ("additionalProperties", "patternProperties", "unevaluatedProperties")


class Tightening:
    """Collects candidate object nodes during compilation, then closes the safe ones.

    A node's context is "merged" when its keys may be combined with another schema's:
    it sits inside an allOf member, a not, an if, a dependentSchemas value, or an applicator
    next to other keywords, or inside a `$ref` target that is used in such a place. Context
    is `True` (merged), or the set of hoisted definitions the node lives in (merged iff
    one of them is)."""

    def __init__(self) -> None:
        self.candidates: list[tuple[dict[str, Any], frozenset[str] | bool]] = []
        self.uses: list[tuple[str, frozenset[str] | bool]] = []  # $ref target, context

    @staticmethod
    def is_candidate(source: dict[str, Any]) -> bool:
        """`source` (the translated schema object) names properties and leaves other
        keys open, and closing it keeps `required`/`minProperties` satisfiable."""
        props = source.get("properties")
        if not isinstance(props, dict) or any(k in source for k in _OPEN):
            return False
        if any(k in source for k in _MERGING):
            return False
        required = source.get("required", [])
        if not isinstance(required, list) or any(k not in props for k in required):
            return False
        minimum = source.get("minProperties", 0)
        return not isinstance(minimum, int | float) or minimum <= len(props)

    @staticmethod
    def merges_children(source: dict[str, Any]) -> bool:
        """Whether `source`'s applicator subschemas are intersected with its own keys."""
        assertions = [k for k in source if k not in ("anyOf", "oneOf", "$ref", "type")]
        return bool(assertions) and any(k in source for k in ("anyOf", "oneOf", "$ref"))

    def apply(self) -> int:
        """Close every candidate whose context is not merged; return how many."""
        merged: set[str] = set()
        changed = True
        while changed:
            changed = False
            for target, ctx in self.uses:
                if target not in merged and (ctx is True or (ctx and ctx & merged)):
                    merged.add(target)
                    changed = True
        closed = 0
        for node, ctx in self.candidates:
            if ctx is True or (ctx and ctx & merged):
                continue
            node["additionalProperties"] = False
            closed += 1
        return closed
