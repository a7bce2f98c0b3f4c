"""Short strings matching a schema's patterns let the shortest-ending search finish strings
that admit no closing quote yet (grammar/examples.py, closing.py)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from llamay.grammar import Constraint, Grammar, byte_compile_cache
from llamay.grammar.examples import pattern_examples, shortest_match

CACHE = byte_compile_cache()


@pytest.mark.parametrize(
    "pattern",
    [
        "1.1",
        r"^[^\s]+$",
        r"^v[0-9]+\.[0-9]+$",
        r"^(a|bc)+x{2,3}$",
        r"[A-Z]{2}-\d{4}",
        r"^\w+@\w+\.com$",
        r"^(?!x)[a-z]+$",
    ],
)
def test_a_short_match_matches(pattern: str) -> None:
    got = shortest_match(pattern)
    assert got is not None and re.search(pattern, got) and len(got) <= 8


def test_patterns_without_a_short_match_give_none() -> None:
    assert shortest_match("[") is None  # not a pattern
    assert shortest_match("a{100}") is None  # too long to be a short ending
    assert shortest_match(r"[^a0A_. b1zZ9x-]") is None  # no candidate character fits


def test_parsing_a_hostile_pattern_does_not_run_it() -> None:
    assert shortest_match("^(a+)+$") == "a"  # built from the parse tree, never searched


def test_examples_come_from_the_grammar_text_json_escaped_shortest_first() -> None:
    lark = '%json {"pattern": "^\\\\d+$"} %json {"pattern": "q\\"q"} %json {"pattern": "1.1"}'
    assert pattern_examples(lark) == (b"0", b"1a1", b'q\\"q')


@pytest.mark.parametrize("limit", [None, 4000])
def test_a_pattern_no_token_by_token_preference_meets_still_ends(limit: int | None) -> None:
    schema = {
        "type": "object",
        "properties": {
            "version": {"type": "string", "pattern": "1.1"},
            "tag": {"type": "string", "pattern": "^v[0-9]+$"},
        },
        "required": ["version", "tag"],
    }
    grammar = Grammar.from_json_schema(schema, layout="compact")
    found = Constraint(grammar, CACHE).completion(limit or 200)
    assert found is not None
    value = json.loads(bytes(found).decode())
    jsonschema.validate(value, schema)
    assert CACHE.min_tokens(grammar, 200) == len(found)
