"""Unit tests for llamay.engine.textstream."""

from __future__ import annotations

import random

import pytest

from llamay.engine.textstream import Push, TextStream


def feed(stream: TextStream, pieces: list[bytes]) -> tuple[list[Push], str]:
    """Push every piece, flush, and return the pushes and all released text."""
    pushes = [stream.push(p) for p in pieces]
    tail = stream.flush()
    released = "".join(p.text for p in pushes) + tail
    assert released == stream.text
    return pushes, released


def bytewise(text: str) -> list[bytes]:
    return [bytes([b]) for b in text.encode()]


def random_split(data: bytes, rng: random.Random, max_len: int = 4) -> list[bytes]:
    pieces, i = [], 0
    while i < len(data):
        n = rng.randint(0, max_len)  # 0: empty pieces happen (special tokens) and must be harmless
        pieces.append(data[i : i + n])
        i += n
    return pieces


# -- UTF-8 -----------------------------------------------------------------------------


def test_ascii_passes_straight_through() -> None:
    s = TextStream()
    assert s.push(b"Hello") == Push("Hello", False)
    assert s.push(b", world") == Push(", world", False)
    assert s.flush() == ""
    assert s.text == "Hello, world"


@pytest.mark.parametrize("text", ["é", "日本", "😀", "a😀b", "naïve 日本語 👩‍👩‍👧 ok"])
def test_multibyte_characters_split_byte_by_byte(text: str) -> None:
    s = TextStream()
    pushes, released = feed(s, bytewise(text))
    assert released == text
    for p in pushes:
        assert "\ufffd" not in p.text  # never a partial character
        p.text.encode("utf-8")  # every release is whole characters
    assert pushes[0].text == ("" if len(text[0].encode()) > 1 else text[0])


def test_character_released_exactly_when_complete() -> None:
    s = TextStream()
    data = "é".encode()
    assert s.push(data[:1]) == Push("", False)
    assert s.push(data[1:]) == Push("é", False)
    emoji = "😀".encode()
    assert [s.push(emoji[i : i + 1]).text for i in range(4)] == ["", "", "", "😀"]


def test_random_splits_round_trip() -> None:
    rng = random.Random(0)
    alphabet = "ab é日本😀\n"
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        _, released = feed(TextStream(), random_split(text.encode(), rng))
        assert released == text


def test_invalid_and_truncated_utf8_become_replacement_characters() -> None:
    s = TextStream()
    assert s.push(b"a\xffb").text == "a\ufffdb"
    assert s.push("日".encode()[:2]).text == ""
    assert s.flush() == "\ufffd"
    assert s.text == "a\ufffdb\ufffd"


# -- stop strings ----------------------------------------------------------------------


def test_stop_split_across_many_pieces_never_leaks() -> None:
    s = TextStream(stop=["<|end|>"])
    pieces = [b"Answer: 42", b"<", b"|e", b"nd", b"|", b">", b" trailing"]
    pushes = [s.push(p) for p in pieces]
    assert "".join(p.text for p in pushes) == "Answer: 42"
    assert [p.stopped for p in pushes] == [False] * 5 + [True, True]
    assert all(p.text == "" for p in pushes[1:])
    assert s.flush() == "" and s.text == "Answer: 42"


def test_stop_split_byte_by_byte_including_multibyte_stop() -> None:
    for stop in ["STOP", "日本", "\n\n###"]:
        text = f"before {stop} after"
        pushes, released = feed(TextStream(stop=[stop]), bytewise(text))
        assert released == "before "
        assert sum(p.stopped and p.text != "" for p in pushes) <= 1


def test_random_splits_never_leak_a_stop_string() -> None:
    rng = random.Random(1)
    stops = ["</s>", "日本", "aab"]
    for _ in range(300):
        text = "".join(rng.choice(["a", "b", "<", "/", "s", ">", "日", "本", "x "]) for _ in range(25))
        pieces = random_split(text.encode(), rng)
        s = TextStream(stop=stops)
        pushes = [s.push(p) for p in pieces]
        released = "".join(p.text for p in pushes) + s.flush()
        hits = [i for i in (text.find(x) for x in stops) if i != -1]
        assert released == (text[: min(hits)] if hits else text)
        assert any(p.stopped for p in pushes) == bool(hits)


def test_earliest_match_wins() -> None:
    s = TextStream(stop=["world", "lo w"])
    assert s.push(b"hello world!") == Push("hel", True)
    s = TextStream(stop=["world", "lo w"])
    _, released = feed(s, [b"hel", b"lo", b" wor", b"ld"])
    assert released == "hel"
    # Two complete matches in one piece: the earlier start wins whatever the list order.
    assert TextStream(stop=["cd", "bcde"]).push(b"abcdef") == Push("a", True)


def test_overlapping_stop_prefix_is_held_correctly() -> None:
    s = TextStream(stop=["aab"])
    assert [s.push(c).text for c in (b"a", b"a", b"a")] == ["", "", "a"]
    assert s.push(b"b") == Push("", True)
    assert s.text == "a"


def test_held_prefix_released_when_the_stop_does_not_complete() -> None:
    s = TextStream(stop=["STOP"])
    assert s.push(b"abc ST").text == "abc "
    assert s.push(b"AR").text == "STAR"
    assert s.push(b" x ST").text == " x "
    assert s.flush() == "ST"
    assert s.text == "abc STAR x ST"


def test_text_after_stop_is_dropped() -> None:
    s = TextStream(stop=["STOP"])
    assert s.push(b"foo STOP bar") == Push("foo ", True)
    assert s.push(b"baz") == Push("", True)
    assert s.push("日".encode()[:1]) == Push("", True)
    assert s.flush() == ""
    assert s.text == "foo " and s.stopped


def test_stop_at_the_very_start() -> None:
    s = TextStream(stop=["###"])
    assert s.push(b"#") == Push("", False)
    assert s.push(b"##x") == Push("", True)
    assert s.text == ""


def test_empty_stop_strings_are_ignored() -> None:
    _, released = feed(TextStream(stop=["", ""]), [b"a", b"b"])
    assert released == "ab"


def test_push_after_flush_is_an_error() -> None:
    s = TextStream(stop=["xy"])
    assert s.push(b"x").text == ""
    assert s.flush() == "x"
    assert s.flush() == ""
    with pytest.raises(RuntimeError):
        s.push(b"y")
