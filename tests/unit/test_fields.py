import pytest

from llamay.api.fields import Fields
from llamay.errors import InvalidRequest


def test_wrong_type_names_the_field() -> None:
    with pytest.raises(InvalidRequest) as e:
        Fields({"n": "3"}).integer("n")
    assert e.value.param == "n" and "integer" in e.value.message and "string" in e.value.message


def test_range_is_checked() -> None:
    with pytest.raises(InvalidRequest) as e:
        Fields({"temperature": 9}).number("temperature", lo=0, hi=2)
    assert "between 0 and 2" in e.value.message


def test_nested_prefix_in_names() -> None:
    with pytest.raises(InvalidRequest) as e:
        Fields({"role": 3}, "messages[2]").text("role", required=True)
    assert e.value.param == "messages[2].role"


def test_booleans_are_not_integers() -> None:
    with pytest.raises(InvalidRequest):
        Fields({"n": True}).integer("n")


def test_body_must_be_an_object() -> None:
    with pytest.raises(InvalidRequest) as e:
        Fields([1, 2])
    assert "JSON object" in e.value.message


def test_null_means_default() -> None:
    assert Fields({"top_p": None}).number("top_p", 1.0) == 1.0
