"""The JSON schema vocabulary: what llguidance enforces directly, what needs a rewrite
(see .schema), and the llguidance options that keep it sound. Any keyword not named
here is an annotation (JSON Schema's rule for unknown keywords) and constrains nothing.

The options (`JSON_OPTIONS`) are chosen so that every text the grammar allows is valid:

- `\\u` escapes are disabled. llguidance lets keys of additional/pattern properties
  spell a declared name with escapes (`"\\u0061"` is `"a"`), which would bypass that
  property's schema. Without `\\u` every string has exactly one spelling; the price is
  that C0 control characters other than \\b \\f \\n \\r \\t, and DEL (which llguidance
  writes only escaped), cannot be generated, so a const/enum string containing one is
  refused, and non-ASCII is emitted as raw UTF-8.
- whitespace is JSON whitespace in bounded runs (one optional newline, then at most 40
  spaces/tabs), so compact, spaced and indented output all match but a model cannot
  loop on blank lines. None before or after the top-level value.
- `oneOf` is kept only where llguidance proves the branches exclusive; `lenient` is off,
  so llguidance's own unimplemented keywords are errors too.

A `format` in FORMATS is enforced as an assertion (the 2020-12 format-assertion
vocabulary), tightened by FORMAT_FIXES where llguidance's checks are looser than the
RFCs; any other format is an annotation.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "JSON_OPTIONS",
    "ENFORCED",
    "UNSUPPORTED",
    "FORMATS",
    "FORMAT_FIXES",
    "COUNTS",
    "SINGLE",
    "MAP",
    "LIST",
]

# Options that make the compiled grammar sound (see the module docstring).
JSON_OPTIONS: dict[str, Any] = {
    "whitespace_pattern": r"\r?\n[ \t]{0,40}|[ \t]{1,40}",
    "item_separator": ",",
    "key_separator": ":",
    "json_allowed_escapes": 'nrbtf\\"',
    "json_allow_general_unicode_escapes": False,
    "coerce_one_of": False,
    "lenient": False,
}

# Keywords llguidance enforces; value is the shape of their subschemas (if any).
SINGLE, MAP, LIST = "single", "map", "list"
ENFORCED: dict[str, str | None] = {
    "type": None, "enum": None, "const": None, "required": None, "$ref": None,
    "properties": MAP, "patternProperties": MAP, "additionalProperties": SINGLE,
    "$defs": MAP, "definitions": MAP,
    "items": SINGLE, "prefixItems": LIST, "minItems": None, "maxItems": None,
    "minLength": None, "maxLength": None, "pattern": None, "format": None,
    "minimum": None, "maximum": None, "exclusiveMinimum": None, "exclusiveMaximum": None,
    "multipleOf": None, "minProperties": None, "maxProperties": None,
    "allOf": LIST, "anyOf": LIST, "oneOf": LIST,
}  # fmt: skip

# Assertions without a direct llguidance counterpart (rewritten or unenforceable; the
# text names them in llguidance errors).
UNSUPPORTED: dict[str, str] = {
    k: "cannot be enforced while sampling"
    for k in (
        "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "propertyNames",
        "contains", "minContains", "maxContains", "uniqueItems", "unevaluatedItems",
        "unevaluatedProperties", "$dynamicRef", "$recursiveRef",
    )
}  # fmt: skip

FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri"}
)
# llguidance's format checks are looser than RFC 3339/1123 in a few places; these extra
# patterns (intersected with the format) keep generated values valid: no Feb 29 outside
# leap years, no leap seconds (":60" is valid only at 23:59:59 UTC, which depends on the
# offset: never generating it is the honest subset), no "--" in label positions 3-4
# (reserved; it excludes unverifiable punycode "xn--" labels) and at most 253 characters.
_DATE = (
    r"[0-9]{4}-(?:0[13-9]|1[0-2])-[0-9]{2}|[0-9]{4}-02-(?:[01][0-9]|2[0-8])"
    r"|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29"
)
_LABEL = r"(?:[^.]{0,3}|[^.]{2}(?:[^.-][^.]|[^.][^.-])[^.]*)"
FORMAT_FIXES: dict[str, dict[str, Any]] = {
    "date": {"pattern": f"^(?:{_DATE})"},
    "date-time": {"pattern": f"^(?:{_DATE}).[0-9]{{2}}:[0-9]{{2}}:[0-5]"},
    "time": {"pattern": "^[0-9]{2}:[0-9]{2}:[0-5]"},
    "hostname": {"pattern": rf"^{_LABEL}(?:\.{_LABEL})*$", "maxLength": 253},
}
COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
