"""Pure rendering of one Responses API answer: the response object, its output items and
the stream's events, built from the chat pipeline's pieces. No I/O: the same builder serves
a streamed and a whole response, so what a stream ends with is what GET returns.

Output items: a `file_search_call` item first when the turn searched the index (the search
is done before the model runs; its events come right after `response.in_progress`), then
the items in the order the model produced them: a `reasoning` item (its text as a
`summary_text` when the request asked for a summary, else as `reasoning_text` content), a
`message` with one `output_text` part, `function_call` items. Content that is only
whitespace between items (a newline before a tool call) opens no message."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ...chat.flow import Piece
from ...chat.pipeline import Choice, Delta, Done, Generation
from ...errors import LlamayError
from ...types import TokenEvent, Usage
from ..http import SSE, sse_event
from .adapter import chat_logprob_json
from .responses_schema import ResponsesRequest, item_id

__all__ = ["ResponseBuilder", "ResponseRenderer", "base_json", "usage_json", "status_of"]

J = dict[str, Any]


def base_json(rid: str, model: str, req: ResponsesRequest, created: float | None = None) -> J:
    """What a response object says before any output: the request's settings echoed."""
    return {
        "id": rid,
        "object": "response",
        "created_at": int(created if created is not None else time.time()),
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "metadata": dict(req.metadata),
        "model": model,
        "output": [],
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": req.effort, "summary": req.summary},
        "store": req.store,
        "temperature": req.sampling.temperature,
        "text": req.text_json,
        "tool_choice": req.tool_choice_json,
        "tools": req.tools_json,
        "top_p": req.sampling.top_p,
        "truncation": req.truncation,
        "usage": None,
        "user": None,
    }


def usage_json(usage: Usage, reasoning_tokens: int) -> J:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": min(reasoning_tokens, usage.completion_tokens)},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def status_of(reason: str) -> str:
    """A finish reason as a response status: a stop (or tool calls) completes, a length
    limit leaves it incomplete, anything else (an abort, an engine error) failed it."""
    if reason in ("stop", "tool_calls"):
        return "completed"
    return "incomplete" if reason == "length" else "failed"


class ResponseBuilder:
    """Feeds pieces in (`push`), takes events out; `finish` closes the open item and
    returns the final response and its last events. Events carry `sequence_number`s from 0.
    With `logprobs`, each token that makes message text carries its log-prob in the
    delta that shows it and in the output_text part (a token whose text is held back
    goes with the message it ends up in)."""

    def __init__(self, base: J, *, summary: bool, logprobs: bool = False) -> None:
        self.base = base
        self.summary = summary
        self.logprobs = logprobs
        self._lps: list[J] = []  # the open message's token log-probs
        self._held: list[J] = []  # those of tokens whose text no item shows yet
        self.output: list[J] = []
        self.seq = 0
        self.reasoning_tokens = 0
        self._open: J | None = None
        self._text = ""
        self._ws = ""  # whitespace-only content not yet in a message
        self._searches: list[J] = []  # file_search_call items `start` puts first

    def add_search(self, item: J) -> None:
        """A finished `file_search_call` item (as the response shows it), the first output
        item; its events are `start`'s."""
        self._searches.append(item)

    # -- events ------------------------------------------------------------------------------
    def _ev(self, kind: str, **fields: Any) -> J:
        event = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event

    def snapshot(self, status: str = "in_progress") -> J:
        return {**self.base, "status": status, "output": [dict(i) for i in self.output]}

    def start(self) -> list[J]:
        out = [self._ev("response.created", response=self.snapshot()),
               self._ev("response.in_progress", response=self.snapshot())]  # fmt: skip
        for item in self._searches:
            self.output.append(item)
            at = len(self.output) - 1
            where = {"output_index": at, "item_id": item["id"]}
            added = {**item, "status": "in_progress", "results": None}
            out.append(self._ev("response.output_item.added", output_index=at, item=added))
            for phase in ("in_progress", "searching", "completed"):
                out.append(self._ev(f"response.file_search_call.{phase}", **where))
            out.append(self._ev("response.output_item.done", output_index=at, item=dict(item)))
        self._searches = []
        return out

    def push(self, pieces: list[Piece], *, token: bool = True, event: TokenEvent | None = None) -> list[J]:
        """The events of one step's pieces; `token`: the step is one generated token (for
        counting reasoning tokens); `event`: that token, for its log-prob."""
        if token and any(p.kind == "reasoning" for p in pieces):
            self.reasoning_tokens += 1
        lp: list[J] = []
        if self.logprobs and event is not None and all(p.kind == "content" for p in pieces):
            lp = [chat_logprob_json(event)]
            if not pieces:  # its text is held back: it goes with the item that shows it
                (self._lps if self._open is not None and self._open["type"] == "message" else self._held).extend(lp)
                lp = []
        out: list[J] = []
        for p in pieces:
            out += self._piece(p, lp)
            lp = []
        return out

    def _where(self) -> J:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self.output) - 1}

    def _piece(self, p: Piece, lp: list[J]) -> list[J]:
        kind = self._open["type"] if self._open is not None else None
        if p.kind != "content":
            self._held = []
        if p.kind == "reasoning":
            out = [] if kind == "reasoning" else self._close("completed") + self._open_reasoning()
            key = "reasoning_summary_text.delta" if self.summary else "reasoning_text.delta"
            index = {"summary_index": 0} if self.summary else {"content_index": 0}
            self._text += p.text
            return out + [self._ev(f"response.{key}", **self._where(), **index, delta=p.text)]
        if p.kind == "content":
            if kind != "message":
                if not (self._ws + p.text).strip():
                    self._ws += p.text
                    self._held += lp
                    return []
                text, self._ws = self._ws + p.text, ""
                out = self._close("completed") + self._open_message()
                lp, self._held = self._held + lp, []
            else:
                text, out = p.text, []
            self._text += text
            self._lps += lp
            return out + [
                self._ev(
                    "response.output_text.delta", **self._where(), content_index=0, delta=text, logprobs=lp
                )
            ]
        if p.kind == "call":
            self._ws = ""
            out = self._close("completed")
            item = {"id": item_id("fc"), "type": "function_call", "call_id": p.id, "name": p.name,
                    "arguments": "", "status": "in_progress"}  # fmt: skip
            return out + self._add(item)
        if p.kind == "args" and kind == "function_call":
            self._text += p.text
            return [self._ev("response.function_call_arguments.delta", **self._where(), delta=p.text)]
        return []

    def _add(self, item: J) -> list[J]:
        self._open, self._text, self._lps = item, "", []
        self.output.append(item)
        return [self._ev("response.output_item.added", output_index=len(self.output) - 1, item=dict(item))]

    def _open_reasoning(self) -> list[J]:
        self._ws = ""
        item: J = {"id": item_id("rs"), "type": "reasoning", "summary": []}
        if not self.summary:
            item["content"] = []
        out = self._add(item)
        if self.summary:
            part = {"type": "summary_text", "text": ""}
            return out + [
                self._ev("response.reasoning_summary_part.added", **self._where(), summary_index=0, part=part)
            ]
        part = {"type": "reasoning_text", "text": ""}
        return out + [self._ev("response.content_part.added", **self._where(), content_index=0, part=part)]

    def _open_message(self) -> list[J]:
        item = {"id": item_id("msg"), "type": "message", "role": "assistant", "status": "in_progress",
                "content": []}  # fmt: skip
        out = self._add(item)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return out + [self._ev("response.content_part.added", **self._where(), content_index=0, part=part)]

    def _close(self, status: str, arguments: dict[str, str] | None = None) -> list[J]:
        """Close the open item (if any) with `status`; `arguments`: the final arguments of
        calls by call id (the streamed text is what the parser saw; the call is what counts)."""
        item = self._open
        if item is None:
            return []
        where, text, out = self._where(), self._text, []
        part: J
        if item["type"] == "reasoning":
            if self.summary:
                part = {"type": "summary_text", "text": text}
                out.append(
                    self._ev("response.reasoning_summary_text.done", **where, summary_index=0, text=text)
                )
                out.append(
                    self._ev("response.reasoning_summary_part.done", **where, summary_index=0, part=part)
                )
                item["summary"] = [part]
            else:
                part = {"type": "reasoning_text", "text": text}
                out.append(self._ev("response.reasoning_text.done", **where, content_index=0, text=text))
                out.append(self._ev("response.content_part.done", **where, content_index=0, part=part))
                item["content"] = [part]
        elif item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": self._lps}
            out.append(
                self._ev("response.output_text.done", **where, content_index=0, text=text, logprobs=self._lps)
            )
            out.append(self._ev("response.content_part.done", **where, content_index=0, part=part))
            item["content"], item["status"] = [part], status
        else:
            final = (arguments or {}).get(item["call_id"], text)
            out.append(self._ev("response.function_call_arguments.done", **where, arguments=final))
            item["arguments"], item["status"] = final, status
        out.append(self._ev("response.output_item.done", output_index=where["output_index"], item=dict(item)))
        self._open, self._text = None, ""
        return out

    # -- the end -------------------------------------------------------------------------------
    def finish(self, choice: Choice, pieces: list[Piece]) -> tuple[J, list[J]]:
        """The final response for `choice` (after its last `pieces`) and the events that
        end the stream: the open item's, then response.completed / .incomplete / .failed."""
        out = self.push(pieces, token=False)
        status = status_of(choice.reason)
        calls = {c.id: c.arguments for c in choice.calls}
        out += self._close("completed" if status == "completed" else "incomplete", calls)
        response = self.snapshot(status)
        response["completed_at"] = int(time.time()) if status == "completed" else None
        response["usage"] = usage_json(choice.usage, self.reasoning_tokens)
        if status == "incomplete":
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        elif status == "failed":
            message = choice.finish.message or f"generation ended: {choice.reason}"
            response["error"] = {"code": "server_error", "message": message}
        if choice.check is not None:
            response["schema_check"] = choice.check  # a schema not enforced in full, checked
        out.append(self._ev(f"response.{status}", response=response))
        return response, out

    def error_event(self, message: str, code: str | None, param: str | None) -> J:
        """The stream's `error` event, for a failure after the stream began."""
        return self._ev("error", code=code, message=message, param=param)


class ResponseRenderer:
    """The chat pipeline's steps (see chat/pipeline.py) through a `ResponseBuilder`: its
    events as SSE frames, or (whole) the final response. `response` is the final response
    once the choice is done."""

    media_type = SSE

    def __init__(self, builder: ResponseBuilder, *, streaming: bool) -> None:
        self.builder = builder
        self.streaming = streaming
        self.response: J | None = None

    def start(self, gen: Generation) -> Sequence[bytes]:
        events = self.builder.start()  # whole or streamed: it places the search items
        return [sse_event(e) for e in events] if self.streaming else ()

    def delta(self, step: Delta) -> Sequence[bytes]:
        events = self.builder.push(step.pieces, event=step.token)
        return [sse_event(e) for e in events] if self.streaming else ()

    def done(self, step: Done) -> Sequence[Any]:
        self.response, last = self.builder.finish(step.choice, step.pieces)
        return [sse_event(e) for e in last] if self.streaming else [self.response]

    def error(self, exc: LlamayError) -> Sequence[bytes]:
        return [sse_event(self.builder.error_event(exc.message, exc.code, exc.param))]
