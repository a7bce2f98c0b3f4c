"""One schema, one way of compiling it: the work unit of the coverage benchmark.

`measure(task)` runs in a worker process (see bench.coverage.pool) and returns a plain,
picklable dict. Three ways (`Task.mode`):

- "nonstrict": llamay's compiler with strict=False, layout and shape "free", then the
  grammar compiled for llguidance's byte tokenizer (what a request goes through before
  it is queued). With `Task.tests` (a JSON-Schema-Test-Suite group) every test instance
  is then matched against the grammar: see `check_instances`.
- "strict": the same with strict=True (no instance checks).
- "llguidance": llguidance on its own, `LLMatcher.grammar_from_json_schema` with its
  default options (lenient off), compiled for the same byte tokenizer.

The compiler API is taken as found (the keyword arguments `layout`/`shape`, the
attribute `unenforced` or its older name `ignored`, and `llamay.grammar.validate` may be
absent), so the benchmark measures whichever compiler is checked out.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["nonstrict", "strict", "llguidance"]
MODES: tuple[Mode, ...] = ("nonstrict", "strict", "llguidance")
MAX_VARIANTS = 64  # serialisations tried per instance
FORMAT_ANNOTATION = "only an annotation by default"  # suite tests llamay departs from

# Instance outcomes (keys of the "instances" dict of a nonstrict result).
VALID_MATCHED = "valid_matched"
VALID_REJECTED = "valid_rejected"
VALID_REJECTED_FORMAT = "valid_rejected_format_asserted"
VALID_FLAGGED = "valid_flagged_by_validation"
INVALID_REJECTED = "invalid_rejected"
INVALID_CAUGHT = "invalid_caught_by_validation"
ACCEPTED_WRONG = "accepted_wrong"
OUTCOMES = (
    VALID_MATCHED, VALID_REJECTED, VALID_REJECTED_FORMAT, VALID_FLAGGED,
    INVALID_REJECTED, INVALID_CAUGHT, ACCEPTED_WRONG,
)  # fmt: skip


@dataclass(frozen=True)
class Task:
    """Compile `schema` the `mode` way; `tests` are suite test cases ({"description",
    "data", "valid"}) to check against a nonstrict grammar."""

    mode: Mode
    schema: Any
    tests: tuple[dict[str, Any], ...] = ()


def measure(task: Task) -> dict[str, Any]:
    """{"ok", "reason", "unenforced", "seconds"} ("message": the error, when refused) and, for nonstrict with tests,
    "instances" (outcome -> count) and "wrong" (descriptions of accepted-but-wrong
    instances). `reason` names why a schema was refused: the SchemaError's keyword, or
    "compile: ..." / "llguidance: ..." for an error that names none."""
    t0 = time.perf_counter()
    out = _llguidance_alone(task.schema) if task.mode == "llguidance" else _llamay(task)
    out["seconds"] = time.perf_counter() - t0
    return out


def _refused(reason: str, message: str) -> dict[str, Any]:
    return {"ok": False, "reason": reason, "message": message[:300], "unenforced": []}


def _short_reason(prefix: str, message: str) -> str:
    """A groupable reason: the message's first clause, without the variable parts that
    follow a colon or a quote."""
    head = message.strip().splitlines()[0] if message.strip() else "error"
    head = head.split(": ", 1)[0].split(" '", 1)[0].split(' "', 1)[0]
    return f"{prefix}: {head[:80]}"


def _schema_error_reason(e: Any) -> str:
    """The keyword; for llguidance failing on what the compiler passed it ("keyword ...
    cannot be enforced: <llguidance's error>"), the keyword and the error's first words."""
    keyword = getattr(e, "keyword", None)
    if not keyword:
        return _short_reason("compile", e.message)
    _, found, cause = e.message.partition("cannot be enforced: ")
    return _short_reason(keyword, cause) if found else str(keyword)


def _llamay(task: Task) -> dict[str, Any]:
    from llamay.errors import GrammarError
    from llamay.grammar import SchemaError, byte_compile_cache

    try:
        grammar = build_grammar(task.schema, strict=task.mode == "strict")
        byte_compile_cache().get(grammar)
    except SchemaError as e:
        return _refused(_schema_error_reason(e), e.message)
    except GrammarError as e:
        return _refused(_short_reason("compile", e.message), e.message)
    unenforced = list(unenforced_of(grammar))
    out: dict[str, Any] = {"ok": True, "reason": None, "unenforced": unenforced}
    if task.mode == "nonstrict" and task.tests:
        out.update(check_instances(grammar, task.schema, task.tests, bool(unenforced), validator()))
    return out


def build_grammar(schema: Any, *, strict: bool) -> Any:
    """Grammar.from_json_schema with free layout and shape where the compiler has them."""
    from llamay.grammar import Grammar

    return Grammar.from_json_schema(schema, strict=strict, **_free_options())


@functools.cache
def _free_options() -> dict[str, Any]:
    from llamay.grammar import Grammar

    params = inspect.signature(Grammar.from_json_schema).parameters
    return {name: "free" for name in ("layout", "shape") if name in params}


def unenforced_of(grammar: Any) -> tuple[str, ...]:
    """What a non-strict grammar does not enforce ("keyword at /pointer")."""
    found = getattr(grammar, "unenforced", None)
    return tuple(found if found is not None else getattr(grammar, "ignored", ()))


@functools.cache
def validator() -> Callable[[Any, Any], list[str]] | None:
    """llamay's after-the-fact validator, `validate(schema, value) -> violations`, or None
    where the compiler has none."""
    try:
        from llamay.grammar.validate import validate
    except ImportError:
        return None
    return validate  # type: ignore[no-any-return]


def _llguidance_alone(schema: Any) -> dict[str, Any]:
    import llguidance

    from llamay.grammar import byte_tokenizer

    try:
        spec = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"lenient": False})
        matcher = llguidance.LLMatcher(byte_tokenizer(), spec, log_level=0)
    except (ValueError, TypeError, RuntimeError) as e:
        return _refused(_short_reason("llguidance", str(e)), str(e))
    if matcher.is_error():
        return _refused(_short_reason("llguidance", matcher.get_error()), matcher.get_error())
    return {"ok": True, "reason": None, "unenforced": []}


# -- the suite's instances -----------------------------------------------------------------


def check_instances(
    grammar: Any,
    schema: Any,
    tests: tuple[dict[str, Any], ...],
    validated: bool,
    validate: Callable[[Any, Any], list[str]] | None,
) -> dict[str, Any]:
    """Classify each test instance (see OUTCOMES). An instance is matched when the grammar
    accepts some compact serialisation of it (`variants`). `validated` says whether the
    server checks finished output (it does when something is unenforced): only then can
    `validate` catch a matched invalid instance; otherwise, or with no validator, a
    matched invalid instance is accepted-but-wrong."""
    counts = dict.fromkeys(OUTCOMES, 0)
    wrong: list[str] = []
    for test in tests:
        data, valid = test["data"], bool(test["valid"])
        matched = any(grammar.matches(text.encode()) for text in variants(data))
        flagged = validated and validate is not None and matched and bool(validate(schema, data))
        if valid and not matched:
            counts[VALID_REJECTED_FORMAT if FORMAT_ANNOTATION in test["description"] else VALID_REJECTED] += 1
        elif valid:
            counts[VALID_FLAGGED if flagged else VALID_MATCHED] += 1
        elif not matched:
            counts[INVALID_REJECTED] += 1
        elif flagged:
            counts[INVALID_CAUGHT] += 1
        else:
            counts[ACCEPTED_WRONG] += 1
            wrong.append(f"{test['description']}: {compact(data)[:200]}")
    return {"instances": counts, "wrong": wrong}


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def variants(value: Any) -> Iterator[str]:
    """Compact texts denoting `value`, at most MAX_VARIANTS: the representation choices a
    generator may make (as in tests/unit/test_grammar_conformance.py): object keys in any
    order, strings with non-ASCII raw or `\\u`-escaped, integral floats as integers."""

    def rec(v: Any) -> list[str]:
        if isinstance(v, bool) or v is None or isinstance(v, int):
            return [json.dumps(v)]
        if isinstance(v, float):
            return [json.dumps(v), str(int(v))] if v.is_integer() else [json.dumps(v)]
        if isinstance(v, str):
            return list(dict.fromkeys([json.dumps(v, ensure_ascii=False), json.dumps(v)]))
        if isinstance(v, list):
            combos = itertools.islice(itertools.product(*map(rec, v)), MAX_VARIANTS)
            return ["[" + ",".join(c) + "]" for c in combos]
        out: list[str] = []
        for order in itertools.islice(itertools.permutations(v), MAX_VARIANTS):
            n = len(order)
            parts = [rec(k) for k in order] + [rec(v[k]) for k in order]
            for combo in itertools.islice(itertools.product(*parts), MAX_VARIANTS):
                out.append("{" + ",".join(f"{combo[i]}:{combo[n + i]}" for i in range(n)) + "}")
                if len(out) >= MAX_VARIANTS:
                    return out
        return out

    return iter(rec(value))
