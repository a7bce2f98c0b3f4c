"""ReasoningParser: every split gives the same split into reasoning and content."""

from __future__ import annotations

import random

import pytest

from llamay.chat.reasoning import ReasoningMarkers, ReasoningParser, detect_reasoning


def run(
    text: str, parts: list[str], *, started: bool = False, tags: tuple[str, str] = ("<think>", "</think>")
) -> tuple[str, str]:
    parser = ReasoningParser(*tags, started=started)
    reasoning = content = ""
    for part in parts:
        r, c = parser.push(part)
        reasoning, content = reasoning + r, content + c
    r, c = parser.finish()
    reasoning, content = reasoning + r, content + c
    assert (parser.reasoning, parser.content) == (reasoning, content)
    return reasoning, content


def all_splits(text: str) -> list[list[str]]:
    """Whole, per character, every single cut, and random multi-cuts."""
    out = [[text], list(text)] + [[text[:i], text[i:]] for i in range(1, len(text))]
    rng = random.Random(0)
    for _ in range(30):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, 4))) if len(text) > 1 else []
        bounds = [0, *cuts, len(text)]
        out.append([text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)])
    return out


CASES = [
    (
        "<think>\nLet me see.\n\nYes.\n</think>\n\nThe answer is 4.\n",
        False,
        ("Let me see.\n\nYes.", "The answer is 4.\n"),
    ),
    ("\n <think>short</think>Answer", False, ("short", "Answer")),
    ("No thinking here, <think> is just text.", False, ("", "No thinking here, <think> is just text.")),
    ("Answer with </think> inside", False, ("", "Answer with </think> inside")),
    ("<think>never closed, cut off  ", False, ("never closed, cut off", "")),
    ("<think></think>", False, ("", "")),
    ("<thi", False, ("", "<thi")),
    ("", False, ("", "")),
    ("Already thinking.\n</think>\n\nDone.", True, ("Already thinking.", "Done.")),
    ("\n\nstill thinking </thi", True, ("still thinking </thi", "")),
    ("Done quickly</think>", True, ("Done quickly", "")),
    ("<think>a</think>b</think>c", False, ("a", "b</think>c")),
]


@pytest.mark.parametrize(("text", "started", "expected"), CASES)
def test_every_split(text: str, started: bool, expected: tuple[str, str]) -> None:
    for parts in all_splits(text):
        assert run(text, parts, started=started) == expected, parts


def test_streams_without_waiting_for_the_end() -> None:
    parser = ReasoningParser()
    assert parser.push("<think>Hmm, ") == ("Hmm,", "")
    assert parser.push("ok</th") == (" ok", "")
    assert parser.push("ink>\n\nHi") == ("", "Hi")
    assert parser.push(" there") == ("", " there")
    assert parser.finish() == ("", "")


def test_other_markers() -> None:
    text = "<|START_THINKING|>plan<|END_THINKING|>act"
    for parts in all_splits(text):
        assert run(text, parts, tags=("<|START_THINKING|>", "<|END_THINKING|>")) == ("plan", "act")


def test_empty_markers_rejected() -> None:
    with pytest.raises(ValueError):
        ReasoningParser("", "</think>")


def test_detect_reasoning() -> None:
    qwen3 = "{% if enable_thinking %}<think>\n\n</think>{% endif %}"
    ids = {"<think>": 10, "</think>": 11}.get
    assert detect_reasoning(qwen3, ids) == ReasoningMarkers("<think>", "</think>", 10, 11)
    assert detect_reasoning(qwen3, lambda t: None) == ReasoningMarkers("<think>", "</think>", None, None)
    r1 = "{% set content = content.split('</think>')[-1] %}"
    assert detect_reasoning(r1, lambda t: None) is not None
    assert detect_reasoning("{{ messages }}", ids) == ReasoningMarkers("<think>", "</think>", 10, 11)
    assert detect_reasoning("{{ messages }}", lambda t: None) is None
    assert detect_reasoning(None, lambda t: None) is None
    magistral = detect_reasoning("[THINK]...[/THINK]", lambda t: None)
    assert magistral is not None and magistral.close_tag == "[/THINK]"


def test_opened_by_prompt() -> None:
    markers = ReasoningMarkers()
    assert markers.opened_by("<|im_start|>assistant\n<think>\n")
    assert not markers.opened_by("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not markers.opened_by("<|im_start|>assistant\n")
    parser = markers.parser(started=True)
    assert parser.push("x</think>y") == ("x", "y")
