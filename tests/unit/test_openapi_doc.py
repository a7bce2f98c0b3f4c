"""/openapi.json states what the parsers accept: every tool_choice they take validates."""

from __future__ import annotations

from typing import Any, cast

import jsonschema
import pytest

from llamay.api.app import create_app
from llamay.api.openapi import openapi_document

DOC = openapi_document(create_app(cast(Any, None)).routes)


def body_schema(path: str) -> dict[str, Any]:
    schema = DOC["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return cast(dict[str, Any], schema["properties"]["tool_choice"])


@pytest.mark.parametrize(
    "choice", ["auto", "none", "required", {"type": "function", "function": {"name": "f"}}]
)
def test_openai_tool_choices(choice: Any) -> None:
    jsonschema.validate(choice, body_schema("/v1/chat/completions"))


@pytest.mark.parametrize("choice", [{"type": "auto"}, {"type": "none"}, {"type": "any"},
                                    {"type": "tool", "name": "f", "disable_parallel_tool_use": True}])  # fmt: skip
def test_anthropic_tool_choices(choice: Any) -> None:
    jsonschema.validate(choice, body_schema("/v1/messages"))


@pytest.mark.parametrize(("path", "choice"), [
    ("/v1/chat/completions", "always"), ("/v1/chat/completions", {"type": "function"}),
    ("/v1/messages", {"type": "tool"}), ("/v1/messages", {"type": "required"}),
])  # fmt: skip
def test_what_the_parsers_refuse_does_not_validate(path: str, choice: Any) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(choice, body_schema(path))


def test_ollama_tool_names_as_ollama_takes_them() -> None:
    props = DOC["paths"]["/api/chat"]["post"]["requestBody"]["content"]["application/json"]["schema"][
        "properties"
    ]
    name = props["tools"]["anyOf"][0]["items"]["properties"]["function"]["properties"]["name"]
    jsonschema.validate("weather.get", name)
    jsonschema.validate("m\u00e9t\u00e9o now", name)
    for bad in ("", "a\nb", "x" * 257):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, name)
