"""The reference validator of the differential tests (tests/unit/grammar_diff.py).

`reference(schema)` is `jsonschema` with the validator class of the schema's own draft,
with ECMA-262 patterns (through `regress`, as JSON Schema specifies; Python's `re` gives
\\d and \\w Unicode meanings), exact decimal `multipleOf`, a boolean exclusive bound read
as draft 4 reads it (the compiler's tolerance for undeclared OpenAPI 3.0 schemas), and a
format checker for the formats llamay asserts (RFC 5321 e-mail: jsonschema's own only
looks for an "@").
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
import regress

from llamay.grammar.drafts import draft_of
from llamay.grammar.formats import PATTERN_FORMATS, check_format
from llamay.grammar.keywords import FORMATS

__all__ = ["reference", "Unverifiable", "ecma_search", "VALIDATORS"]

VALIDATORS = {
    "draft4": jsonschema.Draft4Validator,
    "draft6": jsonschema.Draft6Validator,
    "draft7": jsonschema.Draft7Validator,
    "draft2019-09": jsonschema.Draft201909Validator,
    "draft2020-12": jsonschema.Draft202012Validator,
}


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    try:
        return regress.Regex(pattern, "u")
    except Exception:
        try:
            return regress.Regex(pattern)
        except Exception:
            return None


class Unverifiable(Exception):
    """A pattern the reference engine cannot compile: the instance cannot be judged."""


def ecma_search(pattern: str, text: str) -> bool:
    rx = _regex(pattern)
    if rx is None:
        raise Unverifiable(pattern)
    return rx.find(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not ecma_search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, sub in patterns.items():
        for key, value in instance.items():
            if ecma_search(pattern, key):
                yield from validator.descend(value, sub, path=key, schema_path=pattern)


def _additional(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    props = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    others = [k for k in instance if k not in props and not any(ecma_search(p, k) for p in patterns)]
    if validator.is_type(extra, "object"):
        for key in others:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and others:
        yield jsonschema.ValidationError(f"additional properties {sorted(others)!r} are not allowed")


def _multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[Any]:
    # Decimal arithmetic: in floats 0.7 / 0.0001 is not integral, though 0.7 is a multiple.
    if not validator.is_type(instance, "number"):
        return
    if isinstance(instance, float) and instance != instance:  # pragma: no cover
        return
    try:
        bad = Decimal(repr(instance)) % Decimal(repr(divisor)) != 0
    except ArithmeticError:
        bad = True
    if bad:
        yield jsonschema.ValidationError(f"{instance} is not a multiple of {divisor}")


_TIME = re.compile(
    r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
)


_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_MAILBOX = re.compile(
    rf"(?:{_ATEXT}(?:\.{_ATEXT})*|\"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*\")"
    rf"@(?:{_LABEL}(?:\.{_LABEL})*|\[(?:[0-9]{{1,3}}\.){{3}}[0-9]{{1,3}}\]|\[IPv6:[0-9A-Fa-f:.]+\])"
)


def _pattern_format(name: str, value: object) -> bool:
    return not isinstance(value, str) or check_format(name, value)


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    for name, entry in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers.items():
        if name in FORMATS:
            checker.checkers[name] = entry
    for name in PATTERN_FORMATS:
        checker.checks(name)(functools.partial(_pattern_format, name))

    @checker.checks("email")
    def _email(value: object) -> bool:  # RFC 5321 Mailbox (jsonschema only looks for an "@")
        return not isinstance(value, str) or _MAILBOX.fullmatch(value) is not None

    @checker.checks("time")
    def _time(value: object) -> bool:  # RFC 3339 full-time
        return not isinstance(value, str) or _TIME.fullmatch(value) is not None

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        date, sep, rest = value[:10], value[10:11], value[11:]
        datetime.date.fromisoformat(date)
        return (
            re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", date) is not None
            and sep in "Tt"
            and bool(sep and _TIME.fullmatch(rest))
        )

    return checker


FORMAT_CHECKER = _format_checker()


def _refuse(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _minimum(validator: Any, minimum: Any, instance: Any, schema: Any) -> Iterator[Any]:
    # A boolean exclusiveMinimum next to minimum (draft 4, and OpenAPI 3.0 documents that
    # declare no draft) makes the bound exclusive: the compiler reads it that way wherever
    # it cannot mean anything else, and so does the reference.
    exclusive = schema.get("exclusiveMinimum") is True
    if (
        validator.is_type(instance, "number")
        and _num(minimum)
        and (instance < minimum or (exclusive and instance == minimum))
    ):
        yield jsonschema.ValidationError(f"{instance} is below the minimum {minimum}")


def _maximum(validator: Any, maximum: Any, instance: Any, schema: Any) -> Iterator[Any]:
    exclusive = schema.get("exclusiveMaximum") is True
    if (
        validator.is_type(instance, "number")
        and _num(maximum)
        and (instance > maximum or (exclusive and instance == maximum))
    ):
        yield jsonschema.ValidationError(f"{instance} is above the maximum {maximum}")


def _exclusive(name: str) -> Callable[..., Iterator[Any]]:
    def check(validator: Any, bound: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if isinstance(bound, bool) or not validator.is_type(instance, "number"):
            return
        if (instance <= bound) if name == "min" else (instance >= bound):
            yield jsonschema.ValidationError(f"{instance} is not strictly within {bound}")

    return check


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@functools.cache
def _cls(draft: str) -> Any:
    overrides = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional,
        "multipleOf": _multiple_of,
    }
    if draft not in ("draft4",):
        overrides.update(
            minimum=_minimum,
            maximum=_maximum,
            exclusiveMinimum=_exclusive("min"),
            exclusiveMaximum=_exclusive("max"),
        )
    return jsonschema.validators.extend(VALIDATORS[draft], overrides)


def reference(schema: Any) -> Callable[[Any], bool]:
    """is_valid(instance) under `schema`'s own draft, with ECMA-262 patterns and the
    formats llamay asserts checked. Raises Unverifiable for a pattern it cannot compile."""
    validator = _cls(draft_of(schema))(schema, registry=REGISTRY, format_checker=FORMAT_CHECKER)
    return validator.is_valid  # type: ignore[no-any-return]
