"""Anthropic adapter and block assembler: pure functions against golden JSON."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from llamay.api.anthropic import adapter
from llamay.api.anthropic.blocks import BlockAssembler, signature, tool_id
from llamay.api.anthropic.models import model_json, models_page
from llamay.api.errors import error_body, error_headers, error_status
from llamay.chat.flow import Piece
from llamay.errors import (
    Conflict,
    ContextOverflow,
    EngineError,
    Forbidden,
    GrammarError,
    InvalidRequest,
    LlamayError,
    ModelNotFound,
    Overloaded,
    PayloadTooLarge,
    StoreError,
    Unauthorized,
)
from llamay.types import FinishEvent, Usage


def test_usage_splits_the_prompt_three_ways() -> None:
    assert adapter.usage_json(Usage(100, 7, 60)) == {
        "input_tokens": 40,
        "output_tokens": 7,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 60,
    }
    # A breakpoint at token 90: 30 of those were not cached, so they were written.
    assert adapter.usage_json(Usage(100, 7, 60), 90) == {
        "input_tokens": 10,
        "output_tokens": 7,
        "cache_creation_input_tokens": 30,
        "cache_read_input_tokens": 60,
    }
    # The cache covered more than the breakpoint: nothing to create.
    assert adapter.usage_json(Usage(100, 7, 95), 90)["cache_creation_input_tokens"] == 0
    u = adapter.usage_json(Usage(100, 7, 12), 250, output=0)
    assert u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"] == 100
    assert u["output_tokens"] == 0


@pytest.mark.parametrize(
    ("raw", "released", "stops", "want"),
    [
        (b"hello STOP and", "hello ", ("STOP",), "STOP"),
        (b"hello STOP and", "hello ", ("END", "STOP"), "STOP"),
        (b"ab", "ab", ("STOP",), None),  # ended by an end-of-turn token
        (b"xyz", "xy", ("yz", "z"), "z"),  # only what starts right after the released text
        (b"x\xc3\xa9!", "x", ("\u00e9",), "\u00e9"),
        (b"abc", "zz", ("c",), None),  # inconsistent inputs never guess
    ],
)
def test_matched_stop(raw: bytes, released: str, stops: tuple[str, ...], want: str | None) -> None:
    assert adapter.matched_stop(raw, released, stops) == want


def test_stop_reasons() -> None:
    stop, length = FinishEvent("stop", Usage(1, 1)), FinishEvent("length", Usage(1, 1))
    assert adapter.stop_reason(stop, tool_use=False, stop_sequence=None) == "end_turn"
    assert adapter.stop_reason(stop, tool_use=False, stop_sequence="##") == "stop_sequence"
    assert adapter.stop_reason(stop, tool_use=True, stop_sequence=None) == "tool_use"
    assert adapter.stop_reason(length, tool_use=True, stop_sequence=None) == "max_tokens"


def test_message_and_stream_events() -> None:
    usage = adapter.usage_json(Usage(10, 2, 4))
    content = [{"type": "text", "text": "hi"}]
    assert adapter.message_json("msg_1", "tiny", content, "end_turn", None, usage) == {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "tiny",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 6,
            "output_tokens": 2,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 4,
        },
    }
    start = adapter.message_start("msg_1", "tiny", 10)
    assert start == {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "tiny",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        },
    }
    assert adapter.message_delta("stop_sequence", "##", usage) == {
        "type": "message_delta",
        "delta": {"stop_reason": "stop_sequence", "stop_sequence": "##"},
        "usage": usage,
    }
    frame = adapter.sse_event({"type": "ping"})
    assert frame == b'event: ping\ndata: {"type":"ping"}\n\n'
    text = adapter.sse_event(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "é"}}
    )
    assert text.decode().startswith("event: content_block_delta\ndata: ") and "é" in text.decode()


def test_ids_have_anthropic_prefixes() -> None:
    assert adapter.new_message_id().startswith("msg_")
    assert tool_id("call_abc") == "toolu_abc"


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (InvalidRequest("bad"), 400, "invalid_request_error"),
        (GrammarError("bad schema"), 400, "invalid_request_error"),
        (ContextOverflow("too long"), 400, "invalid_request_error"),
        (Unauthorized("who"), 401, "authentication_error"),
        (Forbidden("no"), 403, "permission_error"),
        (ModelNotFound("no model"), 404, "not_found_error"),
        (Conflict("busy"), 409, "invalid_request_error"),
        (PayloadTooLarge("big"), 413, "request_too_large"),
        (Overloaded("full", retry_after=3), 529, "overloaded_error"),
        (EngineError("boom"), 500, "api_error"),
        (StoreError("fetch failed"), 502, "api_error"),
        (LlamayError("internal"), 500, "api_error"),
    ],
)
def test_error_shapes(exc: LlamayError, status: int, kind: str) -> None:
    assert error_status(exc, "anthropic") == status
    assert error_body(exc, "anthropic") == {"type": "error", "error": {"type": kind, "message": exc.message}}
    headers = error_headers(exc, "anthropic")
    assert headers == ({"retry-after": "3"} if isinstance(exc, Overloaded) else None)


def _run(pieces: list[Piece], *, shown: bool = True) -> tuple[list[dict], list[dict]]:
    asm = BlockAssembler(shown=shown)
    events = asm.push(pieces) + asm.close()
    return events, asm.blocks


def test_blocks_thinking_text_and_tool_use() -> None:
    pieces = [
        Piece("reasoning", "Let me "),
        Piece("reasoning", "think."),
        Piece("content", "\n\n"),
        Piece("content", "Sure"),
        Piece("content", "!"),
        Piece("call", id="call_1", name="get_weather"),
        Piece("args", '{"city":', index=0),
        Piece("args", ' "Paris"}', index=0),
    ]
    events, blocks = _run(pieces)
    sig = signature("Let me think.")
    assert blocks == [
        {"type": "thinking", "thinking": "Let me think.", "signature": sig},
        {"type": "text", "text": "\n\nSure!"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert events == [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Let me "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "think."},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": sig}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "\n\nSure"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "!"}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"city":'},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": ' "Paris"}'},
        },
        {"type": "content_block_stop", "index": 2},
    ]


def test_whitespace_alone_makes_no_text_block() -> None:
    pieces = [
        Piece("content", "\n"),
        Piece("content", " "),
        Piece("call", id="call_2", name="f"),
        Piece("args", "{}"),
    ]
    events, blocks = _run(pieces)
    assert [b["type"] for b in blocks] == ["tool_use"]
    assert events[0]["type"] == "content_block_start" and events[0]["index"] == 0
    assert _run([Piece("content", "  ")]) == ([], [])


def test_omitted_thinking_keeps_only_the_signature() -> None:
    events, blocks = _run([Piece("reasoning", "secret"), Piece("content", "ok")], shown=False)
    assert blocks[0] == {"type": "thinking", "thinking": "", "signature": signature("secret")}
    assert not any(e.get("delta", {}).get("type") == "thinking_delta" for e in events)


def test_cut_off_tool_input_keeps_what_it_has() -> None:
    _, blocks = _run([Piece("call", id="call_3", name="f"), Piece("args", '{"a": "unfini')])
    assert blocks[0]["input"] == {"a": "unfini"}
    _, blocks = _run([Piece("call", id="call_3", name="f"), Piece("args", "[1")])
    assert blocks[0]["input"] == {}  # an input is an object, or nothing


def test_stream_deltas_rebuild_the_blocks() -> None:
    pieces = [
        Piece("reasoning", "hm"),
        Piece("content", "a"),
        Piece("content", "b"),
        Piece("call", id="call_x", name="g"),
    ]
    pieces += [Piece("args", '{"k"'), Piece("args", ": [1, 2]}")]
    events, blocks = _run(pieces)
    rebuilt: list[dict] = []
    json_parts: dict[int, str] = {}
    for e in events:
        if e["type"] == "content_block_start":
            rebuilt.append(dict(e["content_block"]))
        elif e["type"] == "content_block_delta":
            d, b = e["delta"], rebuilt[e["index"]]
            if d["type"] == "text_delta":
                b["text"] += d["text"]
            elif d["type"] == "thinking_delta":
                b["thinking"] += d["thinking"]
            elif d["type"] == "signature_delta":
                b["signature"] = d["signature"]
            else:
                json_parts[e["index"]] = json_parts.get(e["index"], "") + d["partial_json"]
    for i, text in json_parts.items():
        rebuilt[i]["input"] = json.loads(text)
    assert rebuilt == blocks


def test_model_list_pages_newest_first() -> None:
    engine = SimpleNamespace(n_ctx=4096)
    models = [
        model_json(SimpleNamespace(name=f"m{i}", loaded_at=1_700_000_000 + i, engine=engine))  # type: ignore[arg-type]
        for i in range(5)
    ]
    assert models[0] == {"type": "model", "id": "m0", "display_name": "m0", "created_at": "2023-11-14T22:13:20Z",
                         "lifecycle": "active", "max_input_tokens": 4096}  # fmt: skip
    page = models_page(models)
    assert [m["id"] for m in page["data"]] == ["m4", "m3", "m2", "m1", "m0"]
    assert (page["has_more"], page["first_id"], page["last_id"]) == (False, "m4", "m0")
    page = models_page(models, limit=2, after_id="m4")
    assert [m["id"] for m in page["data"]] == ["m3", "m2"] and page["has_more"]
    page = models_page(models, limit=2, before_id="m2")
    assert [m["id"] for m in page["data"]] == ["m4", "m3"] and not page["has_more"]
    assert models_page([]) == {"data": [], "has_more": False, "first_id": None, "last_id": None}
    with pytest.raises(InvalidRequest):
        models_page(models, after_id="nope")
