"""Validation after the fact: does a value satisfy a (hostile) JSON schema?

`validate(schema, value)` uses the `jsonschema` package with the validator of the schema's
declared draft, made safe for untrusted schemas:

- regular expressions (`pattern`, `patternProperties`, and the additionalProperties /
  unevaluatedProperties bookkeeping that consults patternProperties) are matched with
  llguidance's regex engine, which does not backtrack: no ReDoS. A pattern it cannot
  compile (lookaround, backreferences) is reported as a violation rather than handed to
  Python's backtracking `re`;
- `$ref`s are resolved within the schema only: the registry refuses to retrieve anything,
  so nothing is ever fetched;
- at most MAX_ERRORS violations are collected, each message is truncated.

`format` is checked for the formats the grammar compiler enforces (keywords.FORMATS)
where a checker is available, and for those it enforces as patterns
(formats.PATTERN_FORMATS). It runs in the caller's thread and may take milliseconds.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import jsonschema
import jsonschema._utils as _js_utils
import referencing
import referencing.exceptions

from ..errors import GrammarError
from .checks import without_controls
from .drafts import draft_of
from .formats import PATTERN_FORMATS, check_format
from .grammar import Grammar
from .keywords import FORMATS

__all__ = ["validate", "MAX_ERRORS", "safe_search"]

MAX_ERRORS = 20
_MESSAGE_CHARS = 200
_VALIDATORS = {
    "draft4": jsonschema.Draft4Validator,
    "draft6": jsonschema.Draft6Validator,
    "draft7": jsonschema.Draft7Validator,
    "draft2019-09": jsonschema.Draft201909Validator,
    "draft2020-12": jsonschema.Draft202012Validator,
}


_CONTROLS = re.compile("[\x00-\x07\x0b\x0e-\x1f]")


class UncheckablePattern(ValueError):
    """A pattern llguidance's regex engine cannot compile."""


@functools.lru_cache(maxsize=256)
def _pattern_grammar(pattern: str) -> Grammar:
    # llguidance's own JSON `pattern` semantics (an unanchored ECMA-262-style search), as
    # a JSON string grammar that accepts every escape.
    schema = {"type": "string", "pattern": pattern, "x-guidance": {"lenient": False}}
    try:
        return Grammar.from_lark("start: %json " + json.dumps(schema), param="pattern")
    except GrammarError as e:
        raise UncheckablePattern(e.message) from None


def safe_search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (JSON Schema `pattern` semantics),
    in time linear in len(text); UncheckablePattern if the engine refuses the pattern."""
    if not _CONTROLS.search(text):
        pattern = without_controls(pattern)  # exact for such texts; see checks.without_controls
    return _pattern_grammar(pattern).matches(json.dumps(text, ensure_ascii=False).encode())


class _SafeRe:
    """Stands in for the `re` module inside jsonschema's helpers (additionalProperties and
    unevaluatedProperties look keys up in patternProperties with `re.search`): while
    `validate` runs in this thread, searches go to `safe_search`."""

    def __init__(self) -> None:
        self.active = threading.local()

    def search(self, pattern: str, string: str, flags: int = 0) -> bool | re.Match[str] | None:
        if getattr(self.active, "on", False):
            return safe_search(pattern, string)
        return re.search(pattern, string, flags)

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)


_SAFE_RE = _SafeRe()
_js_utils.re = _SAFE_RE  # type: ignore[attr-defined]


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "string"):
        return
    try:
        if not safe_search(pattern, instance):
            yield jsonschema.ValidationError(f"{_short(instance)} does not match {pattern!r}")
    except UncheckablePattern:
        yield jsonschema.ValidationError(_uncheckable(pattern))


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            try:
                found = safe_search(pattern, key)
            except UncheckablePattern:
                yield jsonschema.ValidationError(_uncheckable(pattern))
                break
            if found:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _uncheckable(pattern: str) -> str:
    return f"pattern {pattern!r} uses regex features that cannot be checked safely"


@functools.cache
def _validator_class(draft: str) -> Any:
    return jsonschema.validators.extend(
        _VALIDATORS[draft], validators={"pattern": _pattern, "patternProperties": _pattern_properties}
    )


def _refuse(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


_REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]
_TIME = re.compile(
    r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
)


def _late(name: str, value: object) -> bool:
    return not isinstance(value, str) or check_format(name, value)


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    for name, entry in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers.items():
        if name in FORMATS:
            checker.checkers[name] = entry

    for name in PATTERN_FORMATS:
        checker.checks(name)(functools.partial(_late, name))

    @checker.checks("time")
    def _time(value: object) -> bool:  # RFC 3339 full-time
        return not isinstance(value, str) or _TIME.fullmatch(value) is not None

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value: object) -> bool:
        if not isinstance(value, str):
            return True
        datetime.date.fromisoformat(value[:10])
        return re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value[:10]) is not None and value[10:11] in (
            "T", "t") and _TIME.fullmatch(value[11:]) is not None  # fmt: skip

    return checker


_FORMATS = _format_checker()


def validate(schema: dict[str, Any] | bool, value: Any) -> list[str]:
    """Violations of `schema` by `value`, as "at /pointer: message" (at most MAX_ERRORS);
    [] when valid. Never fetches remote references and never backtracks on regexes."""
    cls = _validator_class(draft_of(schema))
    validator = cls(schema, registry=_REGISTRY, format_checker=_FORMATS)
    out: list[str] = []
    _SAFE_RE.active.on = True
    try:
        for error in itertools.islice(validator.iter_errors(value), MAX_ERRORS):
            out.append(f"at {_pointer(error.absolute_path)}: {error.message[:_MESSAGE_CHARS]}")
    except (referencing.exceptions.Unresolvable, jsonschema.exceptions.SchemaError) as e:
        out.append(f"at /: the schema cannot be evaluated: {str(e)[:_MESSAGE_CHARS]}")
    except RecursionError:
        out.append("at /: the schema nests or recurses too deeply to evaluate")
    except UncheckablePattern as e:  # from the helpers behind additionalProperties
        out.append(f"at /: {_uncheckable(str(e))}")
    except Exception as e:  # a malformed schema can trip jsonschema/referencing anywhere
        out.append(f"at /: the schema cannot be evaluated: {type(e).__name__}")
    finally:
        _SAFE_RE.active.on = False
    return out


def _pointer(parts: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts) or "/"


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
