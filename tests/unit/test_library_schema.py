"""Output types -> JSON schemas (field order = generation order) and answers -> values."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Literal, NotRequired, TypedDict

import pytest
from pydantic import BaseModel, Field, ValidationError

from llamay.errors import InvalidRequest
from llamay.library.schema import compatible_type, output_spec, strip_titles


class Invoice(BaseModel):
    number: str
    total: float
    currency: Literal["EUR", "USD", "GBP"]


@dataclasses.dataclass
class Point:
    y: int
    x: int = 0


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Movie(TypedDict):
    title: str
    year: int
    tags: NotRequired[list[str]]


class Shelf(TypedDict):
    movies: list[Movie]


def test_pydantic_model_properties_keep_declaration_order() -> None:
    spec = output_spec(Invoice)
    assert list(spec.schema["properties"]) == ["number", "total", "currency"]
    assert spec.schema["properties"]["currency"] == {"enum": ["EUR", "USD", "GBP"], "type": "string"}
    assert spec.schema["required"] == ["number", "total", "currency"]
    value = spec.parse('{"number": "4471", "total": 1284.5, "currency": "EUR"}')
    assert value == Invoice(number="4471", total=1284.5, currency="EUR")


def test_dataclass_order_defaults_and_parse() -> None:
    spec = output_spec(Point)
    assert list(spec.schema["properties"]) == ["y", "x"]
    assert spec.schema["required"] == ["y"]
    assert spec.parse('{"y": 2}') == Point(y=2, x=0)


def test_typing_typeddict_works_nested_and_not_required() -> None:
    spec = output_spec(Shelf)
    movie = spec.schema["$defs"]["Movie"]
    assert list(movie["properties"]) == ["title", "year", "tags"]
    assert movie["required"] == ["title", "year"]
    assert spec.parse('{"movies": [{"title": "Up", "year": 2009}]}') == {
        "movies": [{"title": "Up", "year": 2009}]
    }
    with pytest.raises(ValidationError):
        spec.parse('{"movies": [{"title": "Up"}]}')


def test_literal_enum_and_plain_types() -> None:
    assert output_spec(Literal["yes", "no"]).schema == {"enum": ["yes", "no"], "type": "string"}
    assert output_spec(Literal["yes", "no"]).parse('"no"') == "no"
    colour = output_spec(Colour)
    assert colour.schema["enum"] == ["red", "blue"]
    assert colour.parse('"blue"') is Colour.BLUE
    ints = output_spec(list[int])
    assert ints.schema == {"items": {"type": "integer"}, "type": "array"}
    assert ints.parse("[1, 2, 3]") == [1, 2, 3]
    assert output_spec(tuple[str, int]).parse('["a", 1]') == ("a", 1)
    assert output_spec(dict[str, float]).parse('{"a": 1}') == {"a": 1.0}
    with pytest.raises(ValueError):
        ints.parse('["a"]')


def test_a_dict_is_a_schema_and_answers_are_plain_json() -> None:
    schema = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
    spec = output_spec(schema)
    assert spec.schema is schema
    assert spec.parse('{"b": 1, "a": "x"}') == {"b": 1, "a": "x"}


def test_titles_go_but_a_property_named_title_stays() -> None:
    class Book(BaseModel):
        title: str = Field(description="the book's title")
        pages: int

    schema = output_spec(Book).schema
    assert "title" not in schema
    assert schema["properties"]["title"] == {"description": "the book's title", "type": "string"}
    assert "title" not in schema["properties"]["pages"]
    assert strip_titles({"anyOf": [{"title": "A", "type": "string"}]}) == {"anyOf": [{"type": "string"}]}


def test_grammar_is_strict_when_it_can_be_and_loose_otherwise() -> None:
    strict = output_spec(Invoice).grammar
    assert strict.unenforced == ()
    # A set's uniqueItems cannot be enforced while sampling: dropped there, and the
    # parse afterwards still holds the answer to the type.
    loose = output_spec(set[int]).grammar
    assert loose.unenforced and "uniqueItems" in loose.unenforced[0]
    assert loose.matches(json.dumps([1, 1], indent=2).encode())
    assert output_spec(set[int]).parse("[1, 1, 2]") == {1, 2}


def test_the_grammar_holds_generation_to_the_schema_in_order() -> None:
    grammar = output_spec(Invoice).grammar
    good = {"number": "1", "total": 2.5, "currency": "GBP"}
    assert grammar.matches(json.dumps(good, indent=2).encode())
    assert not grammar.matches(
        json.dumps({"total": 2.5, "number": "1", "currency": "GBP"}, indent=2).encode()
    )
    assert not grammar.matches(json.dumps({**good, "currency": "JPY"}, indent=2).encode())


def test_a_type_without_a_schema_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest) as err:
        output_spec(object())
    assert err.value.param == "output"


def test_compatible_type_leaves_other_types_alone() -> None:
    assert compatible_type(int) is int
    assert compatible_type(list[int]) == list[int]
    assert compatible_type(Literal["a"]) == Literal["a"]
