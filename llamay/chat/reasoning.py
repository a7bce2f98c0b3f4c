"""Splitting a reasoning model's output into its thinking and its answer.

Most reasoning models think inside a pair of tags before answering: `<think>...</think>`
(DeepSeek R1, Qwen 3, QwQ, GLM, MiniMax, Kimi, SmolLM3, Granite), `[THINK]...[/THINK]`
(Magistral, Ministral), `<|START_THINKING|>...<|END_THINKING|>` (Command R7B),
`<|channel>thought...<channel|>` (Gemma 4). Some templates open the block themselves
(the generation prompt ends with the open tag: `ReasoningMarkers.opened_by`). Some wrap
the answer too (Granite's `<response>`, Command R7B's `<|START_RESPONSE|>`): those tags
are not part of the answer. gpt-oss speaks in harmony channels instead: its `analysis`
channel is the reasoning (`HarmonyParser`).

`detect_reasoning` finds which of these a model's chat template declares;
`ReasoningMarkers.parser` gives the streaming splitter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

__all__ = [
    "HARMONY",
    "KNOWN_MARKERS",
    "HarmonyParser",
    "ReasoningMarkers",
    "ReasoningParser",
    "detect_reasoning",
]

# (open, close) pairs, most specific first; each is checked in the template text.
KNOWN_MARKERS = (
    ("<|START_THINKING|>", "<|END_THINKING|>"),  # Command R7B
    ("[THINK]", "[/THINK]"),  # Magistral, Ministral reasoning
    ("<|channel>thought", "<channel|>"),  # Gemma 4
    ("<think>", "</think>"),  # DeepSeek R1, Qwen 3, QwQ, and most distills
)

# Answer wrappers some templates ask for around the answer after the thinking.
_ANSWERS = {
    "<|START_THINKING|>": ("<|START_RESPONSE|>", "<|END_RESPONSE|>"),  # Command R7B
}
# Granite 3.3 asks, in its system prompt, for "<think></think>" then "<response></response>".
_GRANITE_ANSWER = ("<response>", "</response>")


@dataclass(frozen=True)
class ReasoningMarkers:
    """A model's think-block markers, with their token ids when each is a single
    special token of the vocabulary (e.g. for a thinking budget that forces the close).

    `answer`: tags wrapping the answer, dropped from it. `interrupts`: markers that end
    an unclosed think block (a model that starts its tool calls without closing it;
    each stays in the answer). `style` "harmony": gpt-oss channels, where `open_tag`
    opens the analysis message, `close_tag` ends it and `resume` is what the model
    writes before its next message (a thinking budget forcing the close must let it
    write that)."""

    open_tag: str = "<think>"
    close_tag: str = "</think>"
    open_token: int | None = None
    close_token: int | None = None
    answer: tuple[str, str] | None = None
    interrupts: tuple[str, ...] = ()
    style: str = "tags"
    resume: str = ""

    def opened_by(self, prompt: str) -> bool:
        """The rendered prompt ends inside an open think block (the template's
        generation prompt already wrote the open tag): parse with `started=True`."""
        tail = prompt.rstrip()
        return self.style == "tags" and tail.endswith(self.open_tag)

    def parser(self, *, started: bool = False) -> ReasoningParser | HarmonyParser:
        if self.style == "harmony":
            return HarmonyParser()
        return ReasoningParser(
            self.open_tag, self.close_tag, started=started, answer=self.answer, interrupts=self.interrupts
        )


HARMONY = ReasoningMarkers(
    "<|channel|>analysis<|message|>", "<|end|>", style="harmony", resume="<|start|>assistant"
)


def detect_reasoning(
    template_source: str | None, special: Callable[[str], int | None]
) -> ReasoningMarkers | None:
    """The think markers the chat template mentions, or (for templates that never
    mention them) a <think>/</think> pair that is special tokens of the vocabulary.
    None when the model shows no sign of a think block."""
    src = template_source or ""
    if "<|channel|>" in src and "analysis" in src:
        return replace(HARMONY, close_token=special(HARMONY.close_tag))
    for open_tag, close_tag in KNOWN_MARKERS:
        if open_tag in src or close_tag in src:
            answer = _ANSWERS.get(open_tag)
            if open_tag == "<think>" and "<think></think>" in src and "<response></response>" in src:
                answer = _GRANITE_ANSWER
            return ReasoningMarkers(open_tag, close_tag, special(open_tag), special(close_tag), answer)
    open_token, close_token = special("<think>"), special("</think>")
    if open_token is not None and close_token is not None:
        return ReasoningMarkers("<think>", "</think>", open_token, close_token)
    return None


class ReasoningParser:
    """Streams generated text into (reasoning, content) pieces.

    A think block counts only at the very start of the output (after optional
    whitespace), or from the first character when `started` (the prompt opened it). The
    reasoning excludes the tags and the whitespace around its text; the content excludes
    the whitespace right after the close tag. An unclosed block is all reasoning, unless
    one of `interrupts` ends it. `answer` tags are dropped from the content. Held back at
    any moment: a possible prefix of the next marker and a whitespace run (whose fate
    depends on what follows), so every split of the same text gives the same result.
    """

    def __init__(
        self,
        open_tag: str = "<think>",
        close_tag: str = "</think>",
        *,
        started: bool = False,
        answer: tuple[str, str] | None = None,
        interrupts: tuple[str, ...] = (),
    ) -> None:
        if not open_tag or not close_tag or (answer is not None and not all(answer)) or not all(interrupts):
            raise ValueError("think markers must be non-empty")
        self.open_tag = open_tag
        self.close_tag = close_tag
        self._interrupts = interrupts
        self._answer = _AnswerTags(*answer) if answer is not None else None
        self._state = "think" if started else "start"  # start | think | answer
        self._buf = ""
        self._fresh = True  # at the start of the reasoning or of the answer: drop whitespace
        self.reasoning = ""
        self.content = ""

    def push(self, text: str) -> tuple[str, str]:
        """(reasoning delta, content delta) for the next generated `text`."""
        self._buf += text
        reasoning = content = ""
        if self._state == "start":
            head = self._buf.lstrip()
            if head.startswith(self.open_tag):
                self._state, self._buf = "think", head[len(self.open_tag) :]
            elif not self.open_tag.startswith(head):
                self._state, self._fresh = "answer", False
            # else: still possibly the open tag (or only whitespace so far): hold
        if self._state == "think":
            i, stop = self._end_of_thinking()
            if i >= 0:
                reasoning = self._lead(self._buf[:i]).rstrip()
                after = i + len(self.close_tag) if stop == self.close_tag else i
                self._state, self._buf, self._fresh = "answer", self._buf[after:], True
            else:
                keep = max(_prefix_len(self._buf, tag) for tag in (self.close_tag, *self._interrupts))
                body, tail = self._buf[: len(self._buf) - keep], self._buf[len(self._buf) - keep :]
                released = self._lead(body).rstrip()
                # A whitespace run is held: dropped if the close tag follows it.
                self._buf = body[len(body.rstrip()) :] + tail if released or not self._fresh else tail
                reasoning = released
        if self._state == "answer":
            content, self._buf = self._lead(self._buf), ""
            if self._answer is not None:
                content = self._answer.push(content)
        return self._record(reasoning, content)

    def finish(self) -> tuple[str, str]:
        """Release what was held back at the end of the output."""
        buf, self._buf = self._buf, ""
        if self._state == "think":  # never closed: all reasoning, minus trailing whitespace
            return self._record(self._lead(buf).rstrip(), "")
        if self._state == "start":
            return self._record("", buf)  # only whitespace or an unfinished open tag
        tail = self._answer.finish() if self._answer is not None else ""
        return self._record("", tail)

    def _end_of_thinking(self) -> tuple[int, str]:
        best, stop = -1, ""
        for tag in (self.close_tag, *self._interrupts):
            i = self._buf.find(tag)
            if i >= 0 and (best < 0 or i < best):
                best, stop = i, tag
        return best, stop

    def _lead(self, text: str) -> str:
        """Drop the whitespace that opens the reasoning or the answer after a block."""
        if self._fresh:
            text = text.lstrip()
            if text:
                self._fresh = False
        return text

    def _record(self, reasoning: str, content: str) -> tuple[str, str]:
        self.reasoning += reasoning
        self.content += content
        return reasoning, content


# Whitespace an answer may start with before its open tag (a longer run is just text).
_ANSWER_LEAD = 64


class _AnswerTags:
    """Drops an answer's wrapper tags as the answer streams: the open tag where the
    answer starts with it (whitespace aside), the close tag wherever it comes."""

    def __init__(self, open_tag: str, close_tag: str) -> None:
        self.open_tag = open_tag
        self.close_tag = close_tag
        self._buf = ""
        self._started = False

    def push(self, text: str) -> str:
        self._buf += text
        if not self._started:
            head = self._buf.lstrip()
            if len(self._buf) - len(head) > _ANSWER_LEAD:
                self._started = True  # the same for every split: decided by the text alone
            elif head.startswith(self.open_tag):
                self._started, self._buf = True, head[len(self.open_tag) :]
            elif not head or self.open_tag.startswith(head):
                return ""
            else:
                self._started = True
        out = []
        while (i := self._buf.find(self.close_tag)) >= 0:
            out.append(self._buf[:i])
            self._buf = self._buf[i + len(self.close_tag) :]
        keep = _prefix_len(self._buf, self.close_tag)
        out.append(self._buf[: len(self._buf) - keep])
        self._buf = self._buf[len(self._buf) - keep :]
        return "".join(out)

    def finish(self) -> str:
        buf, self._buf = self._buf, ""
        return buf


def _prefix_len(text: str, tag: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


# Harmony (gpt-oss): every message is `<|start|>{role}` + a header naming its channel
# (and, for a tool call, its recipient: ` to=functions.NAME`) + `<|message|>` + its text +
# an end marker. The generation prompt ends with `<|start|>assistant`, so the first
# header comes without it.
_H_MESSAGE = "<|message|>"
_H_ENDS = ("<|end|>", "<|call|>", "<|return|>", "<|start|>")
_H_STARTS = ("<|channel|>", "<|start|>", "<|constrain|>", " to=", "to=")
_H_HEADER_LIMIT = 512
# A call as the template writes one, which the harmony tool format parses (tools/harmony.py).
HARMONY_CALL = "<|start|>assistant to=functions."
HARMONY_CALL_END = "<|call|>"


class HarmonyParser:
    """Streams gpt-oss output into (reasoning, content): the `analysis` channel is the
    reasoning; the `final` and `commentary` channels are the content; a message to a
    function (` to=functions.NAME`) goes to the content as the template writes a call
    (`<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>`)
    for the tool parser; messages to built-in tools (python, browser) are dropped. Text
    without a header is content. Same results for every split of the text."""

    def __init__(self) -> None:
        self._state = "start"  # start | header | body | gap
        self._buf = ""
        self._route = "content"  # body goes to: reasoning | content | call | drop
        self.reasoning = ""
        self.content = ""

    def push(self, text: str) -> tuple[str, str]:
        self._buf += text
        out: dict[str, list[str]] = {"reasoning": [], "content": []}
        while self._step(out):
            pass
        return self._record("".join(out["reasoning"]), "".join(out["content"]))

    def finish(self) -> tuple[str, str]:
        buf, self._buf = self._buf, ""
        if self._state == "body":
            out: dict[str, list[str]] = {"reasoning": [], "content": []}
            self._send_to(self._route, buf, out)
            return self._record("".join(out["reasoning"]), "".join(out["content"]))
        if self._state in ("start", "gap") and buf:
            return self._record("", buf)  # text that never became a header
        return self._record("", "")  # a header cut off: nothing was said yet

    def _step(self, out: dict[str, list[str]]) -> bool:
        """Advance one state; False when more text is needed."""
        buf = self._buf
        if self._state in ("start", "gap"):
            if self._state == "gap" and buf.startswith(_H_ENDS[:3]):
                end = next(e for e in _H_ENDS[:3] if buf.startswith(e))
                self._buf = buf[len(end) :]
                return True
            if any(buf.startswith(s) for s in _H_STARTS):
                self._state = "header"
                return True
            if (
                not buf
                or any(s.startswith(buf) for s in _H_STARTS)
                or any(e.startswith(buf) for e in _H_ENDS)
            ):
                return False
            self._state, self._route = "body", "content"  # no header: plain content
            return True
        if self._state == "header":
            i = buf.find(_H_MESSAGE)
            if i < 0:
                if len(buf) <= _H_HEADER_LIMIT:
                    return False
                self._state, self._route = "body", "content"  # not a header after all
                return True
            self._route = self._routing(buf[:i], out)
            self._state, self._buf = "body", buf[i + len(_H_MESSAGE) :]
            return True
        # body
        ends = [(buf.find(e), e) for e in _H_ENDS if e in buf]
        if ends:
            i, end = min(ends)
            self._send_to(self._route, buf[:i], out)
            if self._route == "call":
                out["content"].append(HARMONY_CALL_END)
            # `<|start|>` begins the next header; the other markers end this message.
            self._state, self._buf = "gap", buf[i:] if end == "<|start|>" else buf[i + len(end) :]
            return True
        keep = max(_prefix_len(buf, e) for e in _H_ENDS)
        self._send_to(self._route, buf[: len(buf) - keep], out)
        self._buf = buf[len(buf) - keep :]
        return False

    def _routing(self, header: str, out: dict[str, list[str]]) -> str:
        if header.startswith("<|start|>"):
            header = header[len("<|start|>") :]
        channel = _field(header.rsplit("<|channel|>", 1)[1]) if "<|channel|>" in header else ""
        recipient = ""
        if "to=" in header:
            recipient = _field(header.split("to=", 1)[1])
        if recipient and recipient != "assistant":
            if not recipient.startswith("functions.") or len(recipient) == len("functions."):
                return "drop"
            name = recipient[len("functions.") :]
            out["content"].append(f"{HARMONY_CALL}{name}<|channel|>commentary json{_H_MESSAGE}")
            return "call"
        return "reasoning" if channel == "analysis" else "content"

    @staticmethod
    def _send_to(route: str, text: str, out: dict[str, list[str]]) -> None:
        if text and route != "drop":
            out["reasoning" if route == "reasoning" else "content"].append(text)

    def _record(self, reasoning: str, content: str) -> tuple[str, str]:
        self.reasoning += reasoning
        self.content += content
        return reasoning, content


def _field(text: str) -> str:
    """The word a header field starts with (up to whitespace or the next marker)."""
    end = len(text)
    for stop in (" ", "\t", "\n", "<|"):
        i = text.find(stop)
        if 0 <= i < end:
            end = i
    return text[:end]
