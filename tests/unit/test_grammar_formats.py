"""The standard formats the grammar enforces as patterns (json-pointer,
relative-json-pointer, uri-template), on top of llguidance's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamay.grammar import Grammar
from llamay.grammar.formats import PATTERN_FORMATS, check_format
from llamay.grammar.keywords import FORMATS
from llamay.grammar.validate import validate

FORMAT_DIR = (
    Path(__file__).resolve().parents[1]
    / "data"
    / "json-schema-test-suite"
    / "draft2020-12"
    / "optional"
    / "format"
)


def test_pattern_formats_are_checked_afterwards_too() -> None:
    schema = {"type": "object", "properties": {"p": {"type": "string", "format": "json-pointer"}}}
    assert validate(schema, {"p": "/a/b~0c"}) == []
    assert "json-pointer" in validate(schema, {"p": "a/b"})[0]
    assert check_format("uri-template", "https://x/{id}{?q,r}") and not check_format("uri-template", "{x")
    assert check_format("relative-json-pointer", "1/a") and not check_format("relative-json-pointer", "/a")


def test_other_formats_stay_annotations() -> None:
    for strict in (True, False):
        for name in ("int64", "iri", "regex"):
            g = Grammar.from_json_schema({"type": "string", "format": name}, strict=strict)
            assert g.unenforced == () and g.matches(b'"(not checked"')
    assert not FORMATS & PATTERN_FORMATS.keys()


@pytest.mark.skipif(not FORMAT_DIR.is_dir(), reason="conformance data not present")
def test_pattern_formats_are_enforced_exactly() -> None:
    """json-pointer, relative-json-pointer and uri-template are enforced while sampling:
    the suite's valid values match (but for one with a NUL, which needs a \\u escape the
    grammar never writes) and its invalid ones do not."""
    wrong, checked = [], 0
    for path in sorted(FORMAT_DIR.glob("*.json")):
        for group in json.loads(path.read_text()):
            if group["schema"].get("format") not in PATTERN_FORMATS:
                continue
            grammar = Grammar.from_json_schema(group["schema"])
            assert grammar.unenforced == ()
            for test in group["tests"]:
                if isinstance(test["data"], str) and "\x00" in test["data"]:
                    continue
                checked += 1
                if grammar.matches(json.dumps(test["data"], ensure_ascii=False).encode()) != test["valid"]:
                    wrong.append(f"{test['description']}: {test['data']!r}")
    assert checked > 80
    assert wrong == []
