"""Pieces of the interactive `llamay run`: safe printing, multi-line input, slash commands."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from llamay.cli.chat import ChatSession, Settings, read_message
from llamay.cli.term import Term, printable


def test_model_text_cannot_drive_the_terminal() -> None:
    hostile = "ok\x1b]0;owned\x07\x1b[2J\rgone\tthere\nnext\x7f\x00"
    assert printable(hostile) == "ok]0;owned[2Jgone\tthere\nnext"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_thinking_goes_to_stderr_when_the_answer_is_redirected() -> None:
    out, err = io.StringIO(), io.StringIO()
    t = Term(out, err)
    t.thinking("hmm")
    t.answer("yes")
    t.progress("loading", 0.5)  # no bar off a terminal
    assert out.getvalue() == "yes" and err.getvalue() == "hmm"


def test_a_progress_bar_redraws_in_place_and_ends_its_line() -> None:
    err = Tty()
    t = Term(io.StringIO(), err)
    for f in (0.0, 0.5, 0.5, 1.0):
        t.progress("loading m", f)
    lines = err.getvalue()
    assert lines.count("\r") == 3 and lines.endswith("\n") and "100%" in lines


def lines_of(*typed: str) -> Iterator[str]:
    yield from typed


def reader(*typed: str) -> Any:
    it = lines_of(*typed)

    def read(_prompt: str) -> str:
        try:
            return next(it)
        except StopIteration:
            raise EOFError from None

    return read


def test_triple_quotes_take_several_lines() -> None:
    assert read_message(reader("one line")) == "one line"
    assert read_message(reader('"""first', "second", 'third"""')) == "first\nsecond\nthird"
    assert read_message(reader('"""', "a", "", "b", '"""')) == "a\n\nb"
    assert read_message(reader('"""inline"""')) == "inline"


class NoModel:
    model = "m"


def test_set_and_show_commands() -> None:
    err = io.StringIO()
    s = ChatSession(NoModel(), Term(io.StringIO(), err), Settings(), "this process")  # type: ignore[arg-type]
    assert s.command("/set parameter num_predict 12")
    assert s.settings.max_tokens == 12
    assert s.command("/set parameter top_k x") and s.settings.top_k is None
    assert s.command("/set system Be brief.  Very.") and s.settings.system == "Be brief.  Very."
    assert s.command("/set nothink") and s.settings.thinking is False
    assert s.settings.options() == {"max_tokens": 12, "system": "Be brief.  Very.", "thinking": False}
    s.history = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    assert s.command("/show info") and "turns: 1" in err.getvalue()
    assert s.command("/clear") and s.history == []
    assert s.command("/frobnicate") and "Unknown command '/frobnicate'" in err.getvalue()
    assert not s.command("/bye")
