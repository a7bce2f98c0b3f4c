"""Soundness by sampling: random walks under the token mask must only ever produce JSON
that the reference validator (jsonschema, draft 2020-12) accepts.

The conformance suite checks given instances; this checks what the grammar *generates*,
which is what a model sees. Walks use the byte tokenizer with weights that favour closing
quotes/brackets so they end quickly.
"""

from __future__ import annotations

import datetime
import json
import re
from decimal import Decimal, localcontext
from typing import Any

import jsonschema
import numpy as np
import pytest

from llamay.grammar import Grammar, SchemaError, byte_compile_cache, byte_tokenizer

from .test_grammar_conformance import GROUPS

TOKENIZER = byte_tokenizer()
EOS = TOKENIZER.eos_token
WEIGHTS = np.ones(TOKENIZER.vocab_size)
WEIGHTS[128:255] = 0.05  # UTF-8 lead/continuation bytes
WEIGHTS[list(b'"]}')] = 15.0
WEIGHTS[ord(",")] = 2.0

FORMATS = jsonschema.FormatChecker(formats=())
for _name in ("date", "email", "ipv4", "ipv6", "uuid"):
    FORMATS.checkers[_name] = jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers[_name]
_TIME = re.compile(
    r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
)


@FORMATS.checks("time")
def _time(value: object) -> bool:
    # RFC 3339 full-time; a leap second is never generated, so ":60" counts as invalid.
    m = _TIME.fullmatch(value) if isinstance(value, str) else None
    return not isinstance(value, str) or (m is not None and m.group(2) != "60")


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    date, sep, rest = value[:10], value[10:11], value[11:]
    datetime.date.fromisoformat(date)
    return re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", date) is not None and sep in ("T", "t") and _time(rest)


def _multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Any:
    # Decimal arithmetic: in floats 0.7 / 0.0001 is not integral, though 0.7 is a multiple.
    # The precision holds the whole quotient of any two floats (1e308 / 1e-308 has 617 digits).
    if not validator.is_type(instance, "number"):
        return
    with localcontext() as ctx:
        ctx.prec = 1000
        if Decimal(repr(instance)) % Decimal(repr(divisor)) != 0:
            yield jsonschema.ValidationError(f"{instance} is not a multiple of {divisor}")


EXACT_VALIDATOR = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"multipleOf": _multiple_of})

ADVERSARIAL: list[dict[str, Any]] = [
    {
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "additionalProperties": {"maxLength": 3},
    },
    {"properties": {"x": {"type": "integer"}}, "patternProperties": {"^x": {"type": "boolean"}}},
    {
        "patternProperties": {"^a": {"type": "integer"}, "^b": {"type": "string"}},
        "additionalProperties": False,
    },
    {
        "properties": {'"q\\': {"type": "integer"}, "é": {"type": "string"}},
        "additionalProperties": {"type": "null"},
    },
    {"type": "string", "pattern": '^["\\\\]{2,4}$'},
    {"type": "string", "pattern": "a\nb|\t"},
    {"type": "string", "pattern": "é.$", "maxLength": 4},
    {"type": "string", "minLength": 2, "maxLength": 3},
    {"enum": ['a"b', "c\\d", "é", "\n", 1.5, None, {"k": [1, "x"]}]},
    {"const": 'é\n"x'},
    {"type": "number", "minimum": -1.5, "exclusiveMaximum": 2.25},
    {"type": "number", "multipleOf": 0.25, "maximum": 3},
    {"type": "integer", "exclusiveMinimum": -3, "maximum": 1000, "multipleOf": 7},
    {"type": "number", "maximum": 1e-5, "minimum": -1e-5},
    {"type": ["integer", "string", "null"], "minimum": 5, "maxLength": 2},
    {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "items": False,
        "minItems": 1,
    },
    {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3},
    {"type": "object", "minProperties": 1, "maxProperties": 2, "additionalProperties": {"type": "integer"}},
    {"properties": {"a": {"type": "integer"}}, "required": ["a"], "minProperties": 2, "maxProperties": 3},
    {"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"required": ["b"]}]},
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"items": {"$ref": "#/$defs/node"}, "maxItems": 2},
                },
                "required": ["v"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
    {
        "oneOf": [
            {"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"]},
            {"properties": {"kind": {"const": "b"}}, "required": ["kind"], "additionalProperties": False},
        ]
    },
    *(
        {"type": "string", "format": f}
        for f in ("date", "date-time", "time", "email", "ipv4", "ipv6", "uuid")
    ),
]


def sample(grammar: Grammar, rng: np.random.Generator, limit: int = 400) -> bytes | None:
    """One random text the grammar allows, or None if the walk got too long."""
    matcher = byte_compile_cache().get(grammar).matcher()
    mask = np.zeros((TOKENIZER.vocab_size + 31) // 32, dtype=np.int32)
    out = bytearray()
    while len(out) < limit:
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        allowed = np.unpackbits(mask.view(np.uint8), bitorder="little")[: TOKENIZER.vocab_size].astype(bool)
        assert not matcher.is_error(), matcher.get_error()
        if allowed[EOS] and (rng.random() < 0.4 or allowed.sum() == 1):
            return bytes(out)
        allowed[EOS] = False
        choices = np.flatnonzero(allowed)
        assert len(choices), f"dead end after {bytes(out)!r}"
        token = int(rng.choice(choices, p=WEIGHTS[choices] / WEIGHTS[choices].sum()))
        assert matcher.consume_token(token)
        out.append(token)
    return None


def check(schema: Any, samples: int, rng: np.random.Generator) -> list[str]:
    try:
        grammar = Grammar.from_json_schema(schema)
    except SchemaError:
        return []
    validator = EXACT_VALIDATOR(schema, format_checker=FORMATS)
    wrong: list[str] = []
    for _ in range(samples):
        text = sample(grammar, rng)
        if text is None:
            continue
        try:
            ok = validator.is_valid(json.loads(text))
        except re.error:  # Python's re lacks some ECMA-262 syntax (\p{...}): unverifiable
            return wrong
        if not ok:
            wrong.append(f"{json.dumps(schema)[:100]} generated {text!r}")
    return wrong


def test_generated_json_is_valid_for_adversarial_schemas() -> None:
    rng = np.random.default_rng(7)
    wrong = [w for schema in ADVERSARIAL for w in check(schema, 25, rng)]
    assert wrong == []


@pytest.mark.skipif(not GROUPS, reason="conformance data not present")
def test_generated_json_is_valid_for_suite_schemas() -> None:
    rng = np.random.default_rng(1)
    wrong = [w for _, group in GROUPS for w in check(group["schema"], 5, rng)]
    assert wrong == []
