"""The Responses API's `file_search` tool, its pure parts: the tool and tool_choice parsed,
refusals by name, `file_search_call` input items, where a search goes in a conversation,
how passages reach the prompt, and the builder's items and events (validated against the
openai package's own types)."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from llamay.api.openai.responses_render import ResponseBuilder, base_json
from llamay.api.openai.responses_schema import conversation_messages, parse_responses
from llamay.api.openai.responses_search import (
    DEFAULT_RESULTS,
    MAX_QUERY,
    call_item,
    passages_text,
    query_of,
    result_json,
    search_point,
)
from llamay.chat.flow import Piece
from llamay.chat.pipeline import Choice
from llamay.errors import LlamayError
from llamay.rag.index import Hit
from llamay.types import FinishEvent, Usage

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
FS: Any = {"type": "file_search", "vector_store_ids": ["docs"]}
FN: Any = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
RESULT = result_json(Hit("Revenue grew.", "finance/q3.txt", 10, 23, 0.03))


def test_tool_parsed_and_echoed() -> None:
    req = parse_responses({"input": "hi", "tools": [{**FS, "max_num_results": 3,
                                                     "ranking_options": {"ranker": "auto", "score_threshold": 0.2}}]})  # fmt: skip
    fs = req.file_search
    assert fs is not None and fs.store_ids == ("docs",) and fs.max_results == 3 and fs.min_score == 0.2
    assert fs.param == "tools[0]" and req.tools == [] and req.searching
    assert req.tools_json == [{"type": "file_search", "vector_store_ids": ["docs"], "filters": None,
                               "max_num_results": 3, "ranking_options": {"ranker": "auto", "score_threshold": 0.2}}]  # fmt: skip
    plain = parse_responses({"input": "hi", "tools": [FN, FS]})
    assert plain.file_search is not None and plain.file_search.max_results == DEFAULT_RESULTS
    assert [t.name for t in plain.tools] == ["get_time"] and plain.file_search.param == "tools[1]"
    assert parse_responses({"input": "hi"}).file_search is None


@pytest.mark.parametrize(
    ("choice", "searching", "mode", "echo"),
    [
        (None, True, "none", "auto"),
        ("none", False, "none", "none"),
        ("required", True, "none", "required"),
        ({"type": "file_search"}, True, "none", {"type": "file_search"}),
    ],
)
def test_tool_choice_with_file_search(choice: Any, searching: bool, mode: str, echo: Any) -> None:
    body: Any = {"input": "hi", "tools": [FS], **({"tool_choice": choice} if choice is not None else {})}
    req = parse_responses(body)
    assert req.searching is searching and req.tool_choice.mode == mode and req.tool_choice_json == echo
    # With function tools as well, the model still chooses among those after the search.
    with_fn = parse_responses({**body, "tools": [FS, FN]})
    assert with_fn.searching is searching
    assert with_fn.tool_choice.mode == ("none" if choice == "none" else "auto")


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({**FS, "filters": {"type": "eq", "key": "a", "value": 1}}, "tools[0].filters"),
        ({**FS, "ranking_options": {"hybrid_search": {"embedding_weight": 1, "text_weight": 2}}},
         "tools[0].ranking_options.hybrid_search"),
        ({**FS, "ranking_options": {"ranker": "default-2024-11-15"}}, "tools[0].ranking_options.ranker"),
        ({**FS, "ranking_options": {"score_threshold": 2}}, "tools[0].ranking_options.score_threshold"),
        ({**FS, "max_num_results": 51}, "tools[0].max_num_results"),
        ({**FS, "max_num_results": 0}, "tools[0].max_num_results"),
        ({"type": "file_search"}, "tools[0].vector_store_ids"),
        ({**FS, "vector_store_ids": []}, "tools[0].vector_store_ids"),
        ({**FS, "vector_store_ids": [""]}, "tools[0].vector_store_ids[0]"),
        ({**FS, "vector_store_ids": [7]}, "tools[0].vector_store_ids[0]"),
    ],
)  # fmt: skip
def test_what_cannot_be_honoured_is_refused_by_name(tool: Any, param: str) -> None:
    with pytest.raises(LlamayError) as err:
        parse_responses({"input": "hi", "tools": [tool]})
    assert err.value.status == 400 and err.value.param == param


def test_one_file_search_tool_and_no_other_hosted_tool() -> None:
    with pytest.raises(LlamayError) as err:
        parse_responses({"input": "hi", "tools": [FS, FS]})
    assert err.value.param == "tools[1]"
    with pytest.raises(LlamayError) as err:
        parse_responses({"input": "hi", "tools": [FS, {"type": "web_search_preview"}]})
    assert err.value.param == "tools[1].type"
    with pytest.raises(LlamayError) as err:  # no file_search tool: nothing to choose
        parse_responses({"input": "hi", "tool_choice": {"type": "file_search"}})
    assert err.value.param == "tool_choice.type"


def test_call_item_as_input_and_in_the_prompt() -> None:
    item = {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["revenue?"],
            "results": [{"file_id": "finance/q3.txt", "filename": "q3.txt", "score": 0.5, "text": "Revenue grew.",
                         "attributes": {"start": 10, "end": 23}}]}  # fmt: skip
    req = parse_responses({"input": [{"role": "user", "content": "revenue?"}, item,
                                     {"role": "assistant", "content": "It grew."}]})  # fmt: skip
    assert req.items[1] == item
    messages = conversation_messages(req.items)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == "revenue?\n\n" + passages_text(item["results"])
    assert "[1] finance/q3.txt\nRevenue grew." in messages[0]["content"]
    # Without results (not included), the item adds nothing to the prompt.
    bare = parse_responses({"input": [{"role": "user", "content": "q"}, {**item, "results": None}]})
    assert conversation_messages(bare.items) == [{"role": "user", "content": "q"}]
    # Passages with nothing before them, and an empty search, make a user message.
    alone = conversation_messages([call_item("fs_2", "q", [])])
    assert alone == [{"role": "user", "content": passages_text([])}] and "no passages" in alone[0]["content"]
    with pytest.raises(LlamayError) as err:
        parse_responses({"input": [{**item, "status": "done"}]})
    assert err.value.param == "input[0].status"
    with pytest.raises(LlamayError) as err:
        parse_responses({"input": [{**item, "results": [{"text": 5}]}]})
    assert err.value.param == "input[0].results[0].text"
    with pytest.raises(LlamayError) as err:
        parse_responses({"input": [{**item, "results": [{"text": "t", "attributes": {"k": {"nested": 1}}}]}]})
    assert err.value.param == "input[0].results[0].attributes"


def test_search_point_and_query() -> None:
    user = parse_responses({"input": [{"role": "user", "content": "first"}]}).items[0]
    other = parse_responses({"input": [{"role": "user", "content": "x" * (MAX_QUERY + 10)}]}).items[0]
    fc = {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": "{}"}
    out = {"type": "function_call_output", "id": "fco_1", "call_id": "c", "output": "1"}
    fs = call_item("fs_1", "first", None)
    assert search_point([user]) == 0
    assert search_point([user, fs, fc, out]) is None  # a function-call loop does not search again
    assert search_point([user, fs, fc, out, other]) == 4  # a new user message does
    assert query_of(user) == "first" and query_of(other) == "x" * MAX_QUERY
    with pytest.raises(LlamayError) as err:
        search_point([fc, out])
    assert err.value.param == "input"


def test_builder_puts_the_search_first_with_its_events() -> None:
    for shown in ([RESULT], None):
        req = parse_responses({"model": "m", "input": "hi", "tools": [FS]})
        b = ResponseBuilder(base_json("resp_1", "m", req), summary=False)
        b.add_search(call_item("fs_1", "hi", shown))
        events = b.start()
        events += b.push([Piece("content", "Grew.")])
        final, last = b.finish(Choice(0, "", "", "", [], FinishEvent("stop", Usage(10, 6, 4))), [])
        events += last
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        for e in events:
            EVENT.validate_python(e)
        types = [e["type"] for e in events]
        assert types[:7] == [
            "response.created", "response.in_progress", "response.output_item.added",
            "response.file_search_call.in_progress", "response.file_search_call.searching",
            "response.file_search_call.completed", "response.output_item.done",
        ]  # fmt: skip
        assert events[0]["response"]["output"] == []
        assert events[2]["item"]["status"] == "in_progress" and events[2]["item"]["results"] is None
        assert all(e["item_id"] == "fs_1" and e["output_index"] == 0 for e in events[3:6])
        assert events[6]["item"]["results"] == shown and events[6]["item"]["status"] == "completed"
        assert events[7]["type"] == "response.output_item.added" and events[7]["output_index"] == 1
        parsed = Response.model_validate(final)
        assert [o.type for o in parsed.output] == ["file_search_call", "message"]
        assert parsed.output_text == "Grew."
        call = parsed.output[0]
        assert call.type == "file_search_call" and call.queries == ["hi"]
        if shown is None:
            assert call.results is None
        else:
            assert call.results and call.results[0].file_id == "finance/q3.txt"
            assert call.results[0].filename == "q3.txt"
            assert call.results[0].attributes == {"start": 10, "end": 23}
