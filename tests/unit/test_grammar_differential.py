"""Differential testing of the JSON schema compiler on real-world schemas.

For every K-th schema of the real-world corpus (JSON Schema Store and the components of
public OpenAPI documents, bench/data/schemas.jsonl.gz, at least 1,000 schemas), seeded
guesses at valid values and near-misses (tests/unit/schema_gen.py) are judged by the
reference validator (jsonschema with the schema's own draft, ECMA-262 patterns; see
tests/unit/grammar_diff.py) and matched against the non-strict, free-layout grammar:

- every value the reference accepts must be matched in some spelling (keys in any order,
  numbers with or without a zero fraction), and the first one per schema must also go
  through as generation feeds it (a token mask before every byte, the server's limits),
  unless the grammar declares itself `narrowed`;
- every near-miss the grammar matches must be accepted by the reference, or caught by
  the after-the-fact validation when the grammar lists something `unenforced`.

Values no grammar of ours can write are skipped and counted (strings with C0 controls
other than \\b \\f \\n \\r \\t, or DEL: they need `\\u` escapes, which the grammar never
writes). Everything is seeded, so a run is reproducible. LLAMAY_DIFFERENTIAL=deep takes
every schema and more values per schema (several times longer).
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import zlib
from pathlib import Path
from typing import Any

import pytest

from llamay.grammar import Grammar, SchemaError

from .grammar_diff import Outcome, check_schema, reference, walk_masked, writable, write

# The schema coverage benchmark's corpus (wherever bench/ keeps it); missing is a failure.
CORPUS = min(Path(__file__).resolve().parents[2].glob("bench/**/schemas.jsonl.gz"), default=None)
DEEP = os.environ.get("LLAMAY_DIFFERENTIAL") == "deep"
# Every third schema up to 64 KB (compiling the few larger ones takes most of the time;
# the deep run takes them all).
EVERY, MAX_BYTES = (1, None) if DEEP else (3, 64 * 1024)
VALID, MISSES = (8, 4) if DEEP else (2, 1)
MIN_SCHEMAS = 1000
SLICES = 8  # test cases, so a failure names a slice
WORKERS = 2


def _corpus() -> list[tuple[str, Any]]:
    assert CORPUS is not None, "bench/**/schemas.jsonl.gz not found"
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    fits = [ln for ln in lines if MAX_BYTES is None or len(json.dumps(ln["schema"])) <= MAX_BYTES]
    return [(ln["source"], ln["schema"]) for ln in fits[::EVERY]]


def _check(item: tuple[str, Any]) -> Outcome:
    source, schema = item
    return check_schema(source, schema, seed=zlib.crc32(source.encode()), valid=VALID, misses=MISSES)


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    """Every sampled schema checked, in corpus order, on WORKERS processes."""
    schemas = _corpus()
    with multiprocessing.get_context("spawn").Pool(WORKERS) as pool:
        return pool.map(_check, schemas, chunksize=4)


def test_corpus_is_large_enough(outcomes: list[Outcome]) -> None:
    assert len(outcomes) >= MIN_SCHEMAS


@pytest.mark.parametrize("part", range(SLICES))
def test_no_valid_value_rejected_and_no_invalid_value_accepted(outcomes: list[Outcome], part: int) -> None:
    outcomes = outcomes[part::SLICES]
    rejected = [r for o in outcomes for r in o.rejected]
    wrong = [w for o in outcomes for w in o.wrong]
    compiled = sum(o.compiled for o in outcomes)
    valid = sum(o.valid for o in outcomes)
    summary = (
        f"{len(outcomes)} schemas, {compiled} compiled; {valid} valid values, "
        f"{sum(o.invalid for o in outcomes)} invalid ({sum(o.caught for o in outcomes)} caught "
        f"afterwards), {sum(o.skipped for o in outcomes)} skipped"
    )
    print(summary)
    assert rejected == [], summary + "\n" + "\n".join(rejected[:20])
    assert wrong == [], summary + "\n" + "\n".join(wrong[:20])
    # Guards against a harness that checks nothing.
    assert compiled >= 0.9 * len(outcomes) and valid >= compiled, summary


# -- regressions: shrunk counterexamples the differential runs found -------------------------


def _matches(schema: Any, value: Any) -> bool:
    return write(Grammar.from_json_schema(schema, strict=False), value, prune=False) is not None


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        # draft 4 has no if/then/else: there they are annotations, not a conditional
        (
            {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "if": {"properties": {"type": {"const": "action"}}},
                "then": {"required": ["category"]},
            },
            {"type": "action"},
        ),
        # nor const, contains or propertyNames
        ({"$schema": "http://json-schema.org/draft-04/schema#", "const": 1}, 2),
        ({"$schema": "http://json-schema.org/draft-04/schema#", "contains": {"type": "string"}}, [1]),
        (
            {
                "$schema": "http://json-schema.org/draft-06/schema#",
                "if": {"type": "integer"},
                "then": {"minimum": 5},
            },
            1,
        ),
        # dependentRequired/prefixItems do not exist in draft 7
        ({"$schema": "http://json-schema.org/draft-07/schema#", "dependentRequired": {"a": ["b"]}}, {"a": 1}),
        ({"$schema": "http://json-schema.org/draft-07/schema#", "prefixItems": [{"type": "string"}]}, [1]),
    ],
)
def test_keywords_of_later_drafts_are_annotations(schema: Any, value: Any) -> None:
    assert reference(schema)(value)
    assert _matches(schema, value)


def test_later_keywords_still_assert_where_the_draft_has_them() -> None:
    conditional = {"if": {"type": "integer"}, "then": {"minimum": 5}}
    # draft 7 has if/then: asserted (here checked after the fact, as `not integer` has no
    # exact positive form); draft 6 has none, so nothing is left to check
    draft7 = Grammar.from_json_schema(
        {"$schema": "http://json-schema.org/draft-07/schema#", **conditional}, strict=False
    )
    draft6 = Grammar.from_json_schema(
        {"$schema": "http://json-schema.org/draft-06/schema#", **conditional}, strict=False
    )
    assert draft7.unenforced == ("if at /",) and draft6.unenforced == ()
    assert not _matches({"const": 1}, 2) and not _matches(
        {"$schema": "http://json-schema.org/draft-06/schema#", "const": 1}, 2
    )


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        # patternProperties whose values $ref a definition (Compose-file shape)
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "definitions": {"service": {"type": "object", "properties": {"image": {"type": "string"}}}},
                "properties": {
                    "services": {
                        "type": "object",
                        "patternProperties": {"^[a-zA-Z0-9._-]+$": {"$ref": "#/definitions/service"}},
                        "additionalProperties": False,
                    }
                },
            },
            {"services": {"web": {"image": "nginx", "ports": ["80:80"]}, "db.1": {}}},
        ),
        # a zero fraction under number (every draft) and integer (draft 6 on)
        ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "maximum": 20000}, 10000.0),
        ({"$schema": "http://json-schema.org/draft-06/schema#", "type": "integer", "minimum": 0}, 10000.0),
        ({"type": "number", "multipleOf": 0.5}, 10.0),
        # references through definitions and $defs, across drafts
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "definitions": {"input": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "properties": {"inputs": {"type": "array", "items": {"$ref": "#/definitions/input"}}},
            },
            {"inputs": [{"name": "a"}, {"name": "b", "extra": 1}]},
        ),
        (
            {
                "$defs": {"a": {"$ref": "#/definitions/b"}},
                "definitions": {"b": {"type": "string"}},
                "$ref": "#/$defs/a",
            },
            "x",
        ),
        # a nested object under an optional key
        (
            {"properties": {"opts": {"type": "object", "properties": {"deep": {"type": "object"}}}}},
            {"opts": {"deep": {"k": [1, {"z": None}]}}},
        ),
    ],
)
def test_real_world_shapes_accept_their_valid_values(schema: Any, value: Any) -> None:
    assert reference(schema)(value)
    assert _matches(schema, value)


def test_a_literal_with_del_is_refused_not_a_dead_end() -> None:
    # llguidance writes DEL only as \u007f, which the grammar never writes: such a const
    # used to compile into a grammar that matches nothing.
    with pytest.raises(SchemaError, match="DEL"):
        Grammar.from_json_schema({"const": "a\x7f"}, strict=False)
    assert not writable("a\x7f") and writable("a\t")


def test_a_length_bound_too_costly_next_to_a_pattern_is_checked_afterwards() -> None:
    # A word-count pattern with maxLength 5000 (a real-world schema): llguidance's lexer ran
    # out of fuel at the second byte of generation, so every value was refused. The bound
    # is now left to the after-the-fact check (a 400 under strict).
    schema = {"type": "string", "pattern": "^$|(^(?:\\S+\\s+){0,99}\\S+$)", "maxLength": 5000}
    grammar = Grammar.from_json_schema(schema, strict=False)
    assert grammar.unenforced == ("maxLength at /",)
    assert walk_masked(grammar, json.dumps("What is the meaning of life?").encode()) is None
    with pytest.raises(SchemaError, match="maxLength"):
        Grammar.from_json_schema(schema, strict=True)
    # the same pattern with a bound the lexer copes with stays enforced
    assert Grammar.from_json_schema({**schema, "maxLength": 500}, strict=True).unenforced == ()


@pytest.mark.parametrize("pattern", ["^[^\\\\]+$", '^[^"]+$', '^[^\\\\"/]*$', "^(?:[^\\\\]+/)+$"])
def test_negated_classes_never_let_the_excluded_backslash_or_quote_through(pattern: str) -> None:
    # A real-world schema (`"pattern": "^[^\\\\]+$"` for a folder name) accepted
    # "js\\subfolder/": llguidance's string quoting let \\ and \" through a negated class
    # that also took control characters. Both the grammar and the after-the-fact check
    # (which matches patterns with the same engine) must refuse it.
    from llamay.grammar.validate import safe_search

    schema = {"type": "string", "pattern": pattern}
    is_valid = reference(schema)
    grammar = Grammar.from_json_schema(schema, strict=True)
    for value in ("js/sub/", "js\\sub/", 'say "hi"/', "plain/", "bell\b/", "feed\f/"):
        assert _matches(schema, value) == is_valid(value) == safe_search(pattern, value), value
    keys = {
        "type": "object",
        "patternProperties": {pattern: {"type": "integer"}},
        "additionalProperties": False,
    }
    for key in ("a\\b/", 'a"b/', "ab/"):
        assert _matches(keys, {key: 1}) == reference(keys)({key: 1}), key
    assert grammar.unenforced == ()


def test_a_recursive_many_branched_schema_does_not_hit_the_parser_row_limit() -> None:
    # The TextMate grammar schema of the corpus: its recursive `pattern` definition put
    # 2,723 items in one parser row after `{"patterns":[{`, over llguidance's default
    # 2,000, so every valid output ended in a matcher error at that point.
    schema = next(s for source, s in _all_schemas() if source == "schemastore:tmlanguage")
    value = {
        "scopeName": "source.example",
        "patterns": [{"match": "\\b(if|else)\\b", "name": "keyword.control"}],
    }
    grammar = Grammar.from_json_schema(schema, strict=True)
    assert reference(schema)(value)
    text = write(grammar, value, prune=False)
    assert text is not None and walk_masked(grammar, text) is None


def _all_schemas() -> list[tuple[str, Any]]:
    assert CORPUS is not None
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        return [(ln["source"], ln["schema"]) for ln in map(json.loads, f)]
