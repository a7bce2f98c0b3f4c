"""The JSON schema compiler against the official JSON Schema Test Suite (drafts 4, 6, 7,
2019-09 and 2020-12, vendored in tests/data/json-schema-test-suite).

Every group's schema is compiled in non-strict mode with layout="free", shape="free"
(so valid instances may use any whitespace and extra keys). It may be refused only if it
is listed in REFUSED (unsatisfiable for a generator: a const holding U+0000 cannot be
written without a backslash-u escape). Then:

- valid instance: some serialisation of it is matched in full, once in compact style
  (`separators=(",", ":")`) and once in spaced style (json.dumps defaults), unless the
  grammar declares it `narrowed` (generates a subset of the valid values);
- invalid instance: an exact grammar (nothing `unenforced`) matches no serialisation of
  it; a grammar with unenforced keywords may match it only if `validate()` then reports
  it ("accepted but wrong" must be zero).

"Some serialisation" is because a generator legitimately emits a subset of the texts
denoting a value; the variants tried are exactly the representation choices the grammar
makes (see llamay.grammar.schema): object keys in any order (llguidance fixes schema
order), strings with non-ASCII as raw UTF-8 as well as `\\uXXXX` (the grammar emits no
`\\u` escapes), and integral floats written as integers (`1.0` is the integer 1 to JSON
Schema; the grammar writes `1`). The check on invalid instances uses the same variants,
so no text denoting an invalid value may be accepted.

One deliberate departure: `format` is enforced as an assertion (the 2020-12
format-assertion vocabulary), so the suite's "... is only an annotation by default"
instances are expected to be rejected.
"""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llamay.grammar import Grammar, SchemaError
from llamay.grammar.formats import PATTERN_FORMATS
from llamay.grammar.keywords import FORMATS
from llamay.grammar.validate import validate

DATA = Path(__file__).resolve().parents[1] / "data" / "json-schema-test-suite"
DRAFTS = ("draft4", "draft6", "draft7", "draft2019-09", "draft2020-12")
SUITE = DATA / "draft2020-12"
STYLES = {"compact": (",", ":"), "spaced": (", ", ": ")}
MAX_VARIANTS = 64
# Files whose schemas reference other documents (never fetched, so never resolved).
REMOTE = {"refRemote", "dynamicRef", "vocabulary"}
# Groups a generator cannot satisfy at all (a string with U+0000 needs a \u escape).
REFUSED = {"nul characters in strings"}
# llguidance limitation: a recursive reference with sibling keywords inside its own cycle.
LLGUIDANCE_LIMITS = {"unevaluatedItems with $recursiveRef", "unevaluatedProperties with $recursiveRef"}
# jsonschema 4.26's Draft201909Validator disagrees with the suite here (its 2020-12 one agrees).
JSONSCHEMA_BUGS = {("draft2019-09", "unevaluatedProperties with adjacent non-bool additionalProperties")}


_DECLARE = {
    "draft4": "http://json-schema.org/draft-04/schema#",
    "draft6": "http://json-schema.org/draft-06/schema#",
    "draft7": "http://json-schema.org/draft-07/schema#",
}


def _groups(draft: str = "draft2020-12") -> list[tuple[str, dict[str, Any]]]:
    """The suite's groups for `draft`. Its draft 4-7 schemas do not say `$schema` (the
    folder does), so it is added: an undeclared schema is read as 2020-12."""
    out = []
    for f in sorted((DATA / draft).glob("*.json")):
        for group in json.loads(f.read_text()):
            schema = group["schema"]
            if draft in _DECLARE and isinstance(schema, dict) and "$schema" not in schema:
                group["schema"] = {"$schema": _DECLARE[draft], **schema}
            out.append((f.stem, group))
    return out


def _number(v: float) -> list[str]:
    texts = [json.dumps(v)]
    if v.is_integer():
        texts.append(str(int(v)))
    return texts


def variants(value: Any, seps: tuple[str, str]) -> Iterator[str]:
    """Texts denoting `value` in one whitespace style (bounded in number)."""
    item_sep, key_sep = seps

    def rec(v: Any) -> list[str]:
        if isinstance(v, bool) or v is None or isinstance(v, int):
            return [json.dumps(v)]
        if isinstance(v, float):
            return _number(v)
        if isinstance(v, str):
            return list(dict.fromkeys([json.dumps(v), json.dumps(v, ensure_ascii=False)]))
        if isinstance(v, list):
            combos = itertools.islice(itertools.product(*map(rec, v)), MAX_VARIANTS)
            return ["[" + item_sep.join(c) + "]" for c in combos]
        out: list[str] = []
        for order in itertools.islice(itertools.permutations(v), MAX_VARIANTS):
            keys = [rec(k) for k in order]
            vals = [rec(v[k]) for k in order]
            for combo in itertools.islice(itertools.product(*keys, *vals), MAX_VARIANTS):
                n = len(order)
                out.append("{" + item_sep.join(f"{combo[i]}{key_sep}{combo[n + i]}" for i in range(n)) + "}")
                if len(out) >= MAX_VARIANTS:
                    return out
        return out

    return iter(rec(value))


def expected_valid(test: dict[str, Any], schema: Any = None) -> bool:
    asserted = not isinstance(schema, dict) or schema.get("format") in FORMATS | PATTERN_FORMATS.keys()
    if "only an annotation by default" in test["description"] and asserted:
        return False  # enforced formats are asserted, see the module docstring
    return bool(test["valid"])


def check_group(group: dict[str, Any]) -> tuple[str, str | None, list[str]]:
    """("exact" | "loose", None, problems) or ("refused", keyword, problems)."""
    try:
        grammar = Grammar.from_json_schema(group["schema"], strict=False)
    except SchemaError as e:
        unsatisfiable = not any(t["valid"] for t in group["tests"])
        ok = group["description"] in REFUSED | LLGUIDANCE_LIMITS or (
            unsatisfiable and e.keyword in ("false", "enum", "const")
        )
        return "refused", e.keyword, [] if ok else [f"refused ({e.keyword}): {e.message[:200]}"]
    exact = not grammar.unenforced
    problems = []
    for test in group["tests"]:
        want = expected_valid(test, group["schema"])
        for style, seps in STYLES.items():
            texts = list(variants(test["data"], seps))
            got = [t for t in texts if grammar.matches(t.encode())]
            if want and not got and not grammar.narrowed:
                problems.append(f"valid instance not matched ({style}): {test['description']}: {texts[0]}")
            if not want and got and (exact or not validate(group["schema"], test["data"])):
                problems.append(
                    f"WRONG: invalid instance accepted ({style}): {test['description']}: {got[0]}"
                )
    return ("exact" if exact else "loose"), None, problems


@pytest.mark.parametrize("draft", DRAFTS)
def test_json_schema_suite(draft: str) -> None:
    counts: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    failures = []
    for name, group in _groups(draft):
        if name in REMOTE:
            continue
        outcome, keyword, problems = check_group(group)
        counts[outcome] += 1
        if keyword is not None:
            refused[keyword] += 1
        failures += [f"{name}: {group['description']}: {p}" for p in problems]
    summary = f"{draft}: {dict(counts)} refused by keyword: {dict(refused.most_common())}"
    print(summary)
    assert not failures, summary + "\n" + "\n".join(failures)
    # guards against a compiler that drops or refuses everything
    assert counts["exact"] >= 0.7 * sum(counts.values()), summary


@pytest.mark.parametrize("draft", DRAFTS)
def test_validate_agrees_with_suite(draft: str) -> None:
    wrong = []
    for name, group in _groups(draft):
        if name in REMOTE or (draft, group["description"]) in JSONSCHEMA_BUGS:
            continue
        for test in group["tests"]:
            if "only an annotation by default" in test["description"]:
                continue  # asserted only where jsonschema has a checker (some need extra packages)
            errors = validate(group["schema"], test["data"])
            if expected_valid(test, group["schema"]) == bool(errors):
                wrong.append(f"{name}: {group['description']}: {test['description']}: {errors[:1]}")
    assert wrong == []


GROUPS = _groups()


def test_variants_cover_representations() -> None:
    texts = set(variants({"b": 1.0, "a": "é"}, STYLES["compact"]))
    assert '{"b":1,"a":"é"}' in texts
    assert '{"a":"\\u00e9","b":1.0}' in texts


FORMAT_DIR = SUITE / "optional" / "format"


@pytest.mark.skipif(not FORMAT_DIR.is_dir(), reason="conformance data not present")
def test_format_assertions_never_accept_invalid_values() -> None:
    """The suite's optional format-assertion tests, for the formats we enforce: no invalid
    value may match. Some valid ones are outside the generated subset (quoted e-mail
    local parts, IPv4-in-IPv6, punycode labels, leap seconds) and are only counted."""
    wrong, missed, checked = [], 0, 0
    for path in sorted(FORMAT_DIR.glob("*.json")):
        for group in json.loads(path.read_text()):
            if group["schema"].get("format") not in FORMATS:
                continue  # an annotation: nothing to assert
            grammar = Grammar.from_json_schema(group["schema"])
            for test in group["tests"]:
                checked += 1
                texts = list(variants(test["data"], STYLES["compact"]))
                got = [t for t in texts if grammar.matches(t.encode())]
                if got and not test["valid"]:
                    wrong.append(f"{path.stem}: {test['description']}: {got[0]}")
                missed += bool(test["valid"] and not got)
    print(f"format assertions: {checked} checked, {missed} valid values not generated")
    assert wrong == []
    assert checked > 300 and missed < 40
