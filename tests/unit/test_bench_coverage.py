"""The coverage benchmark's tally on a handful of tiny schemas, measured in this process."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from bench.coverage.main import Entry, is_annotation_or_draft, load_corpus, load_suite, measure_all, tally
from bench.coverage.measure import ACCEPTED_WRONG, VALID_REJECTED, variants


def _entry(source: str, schema: Any, tests: tuple[dict[str, Any], ...] = ()) -> Entry:
    return Entry(source, source.split(":", 1)[0], "draft2020-12", schema, tests)


def _summary(entries: list[Entry]) -> dict[str, Any]:
    return tally(entries, measure_all(entries, jobs=0, timeout=10.0)).overall.summary()


def test_exact_validated_and_refused_are_told_apart() -> None:
    entries = [
        _entry("t:exact", {"type": "integer", "minimum": 1}),
        _entry("t:validated", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
        _entry("t:refused", False),  # accepts nothing: refused in every mode
    ]
    s = _summary(entries)
    assert (s["n"], s["compiled"], s["enforced_exactly"], s["enforced_with_validation"]) == (3, 2, 1, 1)
    assert s["refused"] == 1 and s["refused_by_reason"] == {"false": 1}
    assert s["refused_annotation_or_draft"]["count"] == 0
    # strict refuses uniqueItems; llguidance alone has no uniqueItems either
    assert s["strict"]["compiled"] == 1 and s["strict"]["refused_by_reason"]["uniqueItems"] == 1
    assert s["llguidance_alone"]["compiled"] == 1
    assert s["timeouts"] == 0 and s["errors"] == {}


def test_instances_accepted_but_wrong_and_caught() -> None:
    tests = (
        {"description": "one", "data": 1, "valid": True},
        {"description": "text", "data": "a", "valid": False},
        # mislabelled on purpose: the grammar matches it and nothing checks afterwards
        {"description": "two", "data": 2, "valid": False},
    )
    unique = (
        {"description": "distinct", "data": [1, 2], "valid": True},
        {"description": "repeated", "data": [1, 1], "valid": False},  # matched, then caught
    )
    entries = [
        _entry("suite:int", {"type": "integer"}, tests),
        _entry("suite:unique", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, unique),
    ]
    report = tally(entries, measure_all(entries, jobs=0, timeout=10.0))
    counts = report.overall.summary()["instances"]
    assert counts[ACCEPTED_WRONG] == 1 and counts[VALID_REJECTED] == 0
    assert counts["valid_matched"] == 2 and counts["invalid_rejected"] == 1
    assert counts["invalid_caught_by_validation"] == 1
    assert report.overall.wrong == ["suite:int: two: 2"]


def test_refusal_keywords_classified() -> None:
    assert is_annotation_or_draft("$schema") and is_annotation_or_draft("title")
    assert not is_annotation_or_draft("uniqueItems") and not is_annotation_or_draft("false")
    assert not is_annotation_or_draft("compile: grammar too big") and not is_annotation_or_draft("timeout")
    assert is_annotation_or_draft("$schema: unknown draft") and not is_annotation_or_draft(
        "type: schema too large"
    )


def test_variants_reorder_keys_and_write_integral_floats_as_ints() -> None:
    texts = set(variants({"b": 1.0, "a": "é"}))
    assert '{"a":"é","b":1}' in texts and '{"b":1.0,"a":"\\u00e9"}' in texts


def test_loaders(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl.gz"
    with gzip.open(corpus, "wt") as f:
        for i, schema in enumerate([{"$schema": "http://json-schema.org/draft-07/schema#"}, {}, True]):
            f.write(json.dumps({"source": f"x:s{i}", "schema": schema}) + "\n")
    assert [(e.family, e.draft) for e in load_corpus(corpus, every=2)] == [
        ("x", "draft7"),
        ("x", "draft2020-12"),
    ]
    (tmp_path / "draft4").mkdir()
    group = {"description": "g", "schema": {"type": "string"}, "tests": []}
    (tmp_path / "draft4" / "type.json").write_text(json.dumps([group, {**group, "schema": True}]))
    suite = load_suite({"draft4": tmp_path / "draft4"})
    assert suite[0].schema == {"$schema": "http://json-schema.org/draft-04/schema#", "type": "string"}
    assert suite[1].schema is True and suite[0].source == "suite:draft4/type[0]"
