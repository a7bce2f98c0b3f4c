"""The JSON schema compiler against the official JSON Schema Test Suite (draft 2020-12).

For every group: either the compiler refuses the schema with a SchemaError naming a
keyword, or the grammar must agree with the suite on every instance:

- valid instance: some serialisation of it is matched in full, once in compact style
  (`separators=(",", ":")`) and once in spaced style (json.dumps defaults);
- invalid instance: no serialisation of it is matched, in either style.

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

SUITE = Path("/work/shared/conformance/json-schema-test-suite-2020-12")
STYLES = {"compact": (",", ":"), "spaced": (", ", ": ")}
MAX_VARIANTS = 64


def _groups() -> list[tuple[str, dict[str, Any]]]:
    if not SUITE.is_dir():
        return []
    return [(f.stem, g) for f in sorted(SUITE.glob("*.json")) for g in json.loads(f.read_text())]


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


def expected_valid(test: dict[str, Any]) -> bool:
    if "only an annotation by default" in test["description"]:
        return False  # format is asserted, see the module docstring
    return bool(test["valid"])


def check_group(group: dict[str, Any]) -> tuple[str, str | None, list[str]]:
    """("pass", None, []) / ("refused", keyword, []) / ("fail", None, [problems])."""
    try:
        grammar = Grammar.from_json_schema(group["schema"])
    except SchemaError as e:
        return "refused", e.keyword, []
    problems = []
    for test in group["tests"]:
        want = expected_valid(test)
        for style, seps in STYLES.items():
            texts = list(variants(test["data"], seps))
            got = [t for t in texts if grammar.matches(t.encode())]
            if want and not got:
                problems.append(f"valid instance not matched ({style}): {test['description']}: {texts[0]}")
            if not want and got:
                problems.append(f"WRONG: invalid instance matched ({style}): {test['description']}: {got[0]}")
    return ("fail" if problems else "pass"), None, problems


GROUPS = _groups()


@pytest.mark.skipif(not GROUPS, reason="conformance data not present")
def test_json_schema_suite() -> None:
    counts: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    failures = []
    for name, group in GROUPS:
        outcome, keyword, problems = check_group(group)
        counts[outcome] += 1
        if keyword is not None:
            refused[keyword] += 1
            assert keyword, f"{name}: {group['description']}: refusal names no keyword"
        failures += [f"{name}: {group['description']}: {p}" for p in problems]
    summary = f"{dict(counts)} refused by keyword: {dict(refused.most_common())}"
    print(summary)
    assert not failures, summary + "\n" + "\n".join(failures)
    assert counts["pass"] >= 170, summary  # guards against a compiler that refuses everything


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
            try:
                grammar = Grammar.from_json_schema(group["schema"])
            except SchemaError as e:
                assert e.keyword == "format"
                continue
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
