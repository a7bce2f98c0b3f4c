"""Real-world JSON schemas through a real server (tiny generated model): older drafts,
vendor keywords, formats that are only annotations, exclusive oneOf, and what `strict`
does with a keyword no grammar can enforce, on all three APIs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.serverproc import ServerProc, start_server

MSG = [{"role": "user", "content": "Describe it."}]

DRAFT4 = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "id": "http://example.com/server.json",
    "type": "object",
    "definitions": {"port": {"type": "integer", "minimum": 1, "maximum": 100, "exclusiveMaximum": True}},
    "properties": {"name": {"type": "string", "maxLength": 8}, "port": {"$ref": "#/definitions/port"}},
    "required": ["name", "port"],
    "additionalProperties": False,
}
VENDOR = {
    "type": "object",
    "preferredOrder": ["colour"],
    "properties": {"colour": {"type": "string", "format": "color", "maxLength": 10, "_format": "hex", "isUniqueKey": True}},
    "required": ["colour"],
}  # fmt: skip
PET = {
    "oneOf": [
        {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "minimum": 0, "maximum": 9}},
         "required": ["kind", "lives"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
         "required": ["kind", "good"], "additionalProperties": False},
    ]
}  # fmt: skip
# Every text the grammar allows is ["a","a",...]: always a uniqueItems violation.
TWINS = {"type": "array", "items": {"enum": ["a"]}, "minItems": 2, "maxItems": 3, "uniqueItems": True}


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, "-ctx", "2048", home=tmp_path_factory.mktemp("home")) as s:
        yield s


@pytest.fixture()
def client(server: ServerProc) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=60)


def fmt(schema: dict[str, Any], strict: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "thing", "schema": schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def ask(client: openai.OpenAI, schema: dict[str, Any], seed: int, **kw: Any) -> Any:
    return client.chat.completions.create(
        model="", messages=MSG, response_format=fmt(schema, kw.pop("strict", None)), temperature=1.0, seed=seed,
        max_tokens=300, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("schema", [DRAFT4, VENDOR, PET], ids=["draft4", "vendor", "oneof"])
@pytest.mark.parametrize("seed", range(3))
def test_real_world_schemas_are_enforced(client: openai.OpenAI, schema: dict[str, Any], seed: int) -> None:
    r = ask(client, schema, seed, strict=True)
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    value = json.loads(choice.message.content)
    validator = jsonschema.Draft4Validator if schema is DRAFT4 else jsonschema.Draft202012Validator
    validator(schema).validate(value)
    assert getattr(choice, "schema_check", None) is None  # everything was enforced: nothing to report
    if schema is DRAFT4:
        assert value["port"] < 100  # the draft-04 boolean exclusiveMaximum held


def test_strict_refuses_what_cannot_be_enforced(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        ask(client, TWINS, 0, strict=True)
    message = str(err.value)
    assert "uniqueItems" in message and "/" in message


def test_non_strict_reports_the_violation(client: openai.OpenAI) -> None:
    r = ask(client, TWINS, 0)
    check = r.choices[0].model_extra["schema_check"]  # type: ignore[index]
    assert check["unenforced"] == ["uniqueItems at /"]
    assert check["valid"] is False and check["errors"]
    assert json.loads(r.choices[0].message.content)[0] == "a"


def test_non_strict_report_when_streaming(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="", messages=MSG, response_format=fmt(TWINS), temperature=0, max_tokens=300, stream=True
    )
    finals = [c.choices[0] for c in stream if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1
    assert finals[0].model_extra["schema_check"]["valid"] is False  # type: ignore[index]


def test_anthropic_and_ollama_report_too(server: ServerProc) -> None:
    a = anthropic.Anthropic(base_url=server.base, api_key="x", max_retries=0, timeout=60)
    msg = a.messages.create(
        model="", max_tokens=300, messages=MSG,  # type: ignore[arg-type]
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": TWINS}}, "temperature": 0},
    )  # fmt: skip
    assert msg.model_extra["schema_check"]["valid"] is False  # type: ignore[index]
    r = httpx.post(
        server.base + "/api/chat",
        json={"model": "", "messages": MSG, "format": TWINS, "stream": False, "options": {"temperature": 0}},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["schema_check"]["unenforced"] == ["uniqueItems at /"]
    strict = httpx.post(
        server.base + "/api/chat",
        json={"model": "", "messages": MSG, "format": TWINS, "strict": True, "stream": False},
        timeout=60,
    )
    assert strict.status_code == 400 and "uniqueItems" in strict.text


def test_tight_by_default_and_layouts(client: openai.OpenAI) -> None:
    open_schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    for seed in range(3):
        r = ask(client, open_schema, seed)
        text = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop"
        assert list(json.loads(text)) == ["a"]  # no invented keys
        assert ": " in text and "\t" not in text  # indented: the key separator has its space
        compact = (
            ask(client, open_schema, seed, extra_body={"json_layout": "compact"}).choices[0].message.content
        )
        assert compact == json.dumps(json.loads(compact), separators=(",", ":"))  # no whitespace at all


def test_schema_bounds_the_output_without_max_tokens(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    r = client.chat.completions.create(
        model="", messages=MSG, response_format=fmt(schema), temperature=1.0, seed=1
    )
    assert r.choices[0].finish_reason == "stop"
    # in the canonical indented layout (the default), a token being at least one byte
    assert r.usage is not None and r.usage.completion_tokens <= len(json.dumps({"ok": False}, indent=2)) + 1
