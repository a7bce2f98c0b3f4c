"""Tools from functions: name, description and argument schema from the signature, type
hints and docstring; arguments validated into the annotated types when the tool runs."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from typing import Literal

import pytest
from pydantic import BaseModel

import llamay
from llamay.chat.tools import parse_tools
from llamay.chat.tools.spec import args_rule
from llamay.errors import InvalidRequest
from llamay.library.tools import Tool, as_tool, describe, result_text


class Unit(enum.Enum):
    C = "c"
    F = "f"


@llamay.tool
def get_weather(city: str, unit: Literal["c", "f"] = "c", days: int = 1) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: The city, as people
            write it.
        unit: Celsius or Fahrenheit.
    """
    return {"city": city, "temp": 31, "unit": unit, "days": days}


def test_spec_from_signature_and_docstring() -> None:
    spec = get_weather.spec
    assert spec.name == "get_weather"
    assert spec.description == "Current weather for a city."
    params = spec.parameters
    assert list(params["properties"]) == ["city", "unit", "days"]
    assert params["required"] == ["city"]
    assert params["additionalProperties"] is False
    assert params["properties"]["city"] == {"description": "The city, as people write it.", "type": "string"}
    assert params["properties"]["unit"] == {
        "default": "c",
        "description": "Celsius or Fahrenheit.",
        "enum": ["c", "f"],
        "type": "string",
    }
    assert params["properties"]["days"] == {"default": 1, "type": "integer"}
    args_rule(spec)  # compiles as the grammar of a call's arguments


def test_the_spec_survives_the_api_parser_unchanged() -> None:
    (parsed,) = parse_tools(
        [{"type": "function", "function": {"name": "get_weather", "description": get_weather.description,
                                            "parameters": get_weather.parameters}}]
    )  # fmt: skip
    assert parsed.parameters == get_weather.parameters


def test_the_tool_is_still_the_function() -> None:
    assert get_weather("Pune")["temp"] == 31
    assert get_weather.__name__ == "get_weather"
    assert get_weather.__doc__ is not None and "Current weather" in get_weather.__doc__


def test_invoke_validates_and_fills_defaults() -> None:
    assert asyncio.run(get_weather.invoke({"city": "Pune"})) == {
        "city": "Pune",
        "temp": 31,
        "unit": "c",
        "days": 1,
    }
    with pytest.raises(ValueError):
        asyncio.run(get_weather.invoke({"city": "Pune", "unit": "k"}))
    with pytest.raises(ValueError):
        asyncio.run(get_weather.invoke({"city": "Pune", "extra": 1}))


def test_enum_model_and_dataclass_parameters_arrive_as_their_types() -> None:
    class Address(BaseModel):
        street: str
        number: int

    @dataclasses.dataclass
    class Window:
        start: int
        end: int

    seen: list[object] = []

    @llamay.tool
    async def book(unit: Unit, where: Address, when: Window) -> str:
        """Book a visit."""
        seen.extend([unit, where, when])
        return "booked"

    props = book.parameters["properties"]
    assert list(props) == ["unit", "where", "when"]
    assert book.parameters["$defs"]["Unit"]["enum"] == ["c", "f"]
    assert list(book.parameters["$defs"]["Address"]["properties"]) == ["street", "number"]
    raw = {"unit": "f", "where": {"street": "Main", "number": 4}, "when": {"start": 1, "end": 2}}
    assert asyncio.run(book.invoke(raw)) == "booked"
    assert seen == [Unit.F, Address(street="Main", number=4), Window(1, 2)]
    assert book.is_async


def test_decorator_with_arguments_and_plain_functions() -> None:
    @llamay.tool(name="lookup", description="Find a word.")
    def find(word: str) -> str:
        return word

    assert isinstance(find, Tool) and find.name == "lookup" and find.description == "Find a word."

    def plain(n: int) -> int:
        """Double a number."""
        return 2 * n

    made = as_tool(plain)
    assert isinstance(made, Tool) and made.name == "plain" and made.description == "Double a number."
    spec = as_tool({"type": "function", "function": {"name": "x", "parameters": {"type": "object"}}})
    assert not isinstance(spec, Tool) and spec.name == "x"


def test_unannotated_parameters_take_any_json() -> None:
    @llamay.tool
    def echo(value, times: int = 1):  # type: ignore[no-untyped-def]
        return value

    assert echo.parameters["properties"]["value"] == {}
    assert asyncio.run(echo.invoke({"value": [1, {"a": 2}]})) == [1, {"a": 2}]


@pytest.mark.parametrize(
    "fn",
    [lambda *args: None, lambda **kw: None],
    ids=["varargs", "varkw"],
)
def test_signatures_a_model_cannot_call_are_refused(fn: object) -> None:
    with pytest.raises(InvalidRequest):
        Tool(fn, name="bad")  # type: ignore[arg-type]


def test_bad_names_are_refused() -> None:
    with pytest.raises(InvalidRequest):
        Tool(lambda: None)  # "<lambda>" is not a tool name


def test_docstring_styles() -> None:
    google = describe("Do it.\n\nArgs:\n    x (int): The x.\n    y: The y,\n        long.\n\nReturns:\n    z")
    assert google == ("Do it.", {"x": "The x.", "y": "The y, long."})
    numpy = describe("Do it.\n\nParameters\n----------\nx : int\n    The x.\ny : str\n    The y.\n")
    assert numpy == ("Do it.", {"x": "The x.", "y": "The y."})
    sphinx = describe("Do it.\n\n:param x: The x.\n:param int y: The y.\n:returns: z")
    assert sphinx == ("Do it.", {"x": "The x.", "y": "The y."})
    assert describe(None) == ("", {})


def test_results_become_message_text() -> None:
    class Reading(BaseModel):
        temp: float

    assert result_text("plain") == "plain"
    assert result_text({"a": [1, 2]}) == '{"a": [1, 2]}'
    assert result_text(Reading(temp=3.5)) == '{"temp": 3.5}'
    assert result_text(Unit.C) == '"c"'
