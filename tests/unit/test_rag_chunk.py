"""Chunking: passages on paragraph boundaries within the word limits, and byte ranges that
slice the source file to exactly the passage text (multi-byte UTF-8, BOM, CRLF included)."""

from __future__ import annotations

import random

import pytest

from llamay.rag.chunk import LONG_WORD, MAX_WORDS, MIN_WORDS, Passage, chunk, paragraph_spans, word_count
from llamay.rag.extract import plain_text
from llamay.rag.extracted import NotExtractable, utf8_offsets

WORDS = ["alpha", "béta", "gâteau", "日本語", "naïve", "🎉party", "Größe", "x", "ünïcödé", "data"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + rng.choice([".", "!", "?"])


def paragraph(rng: random.Random, n_words: int) -> str:
    parts, left = [], n_words
    while left > 0:
        k = min(left, rng.randint(5, 25))
        parts.append(sentence(rng, k))
        left -= k
    return " ".join(parts)


def corpus(seed: int, newline: str = "\n") -> str:
    rng = random.Random(seed)
    paras = [paragraph(rng, rng.choice([3, 20, 60, 140, 300, 700])) for _ in range(25)]
    seps = [newline * 2, newline + "  " + newline, newline * 4, newline + "\t" + newline + newline]
    return "# Title" + newline * 2 + "".join(p + rng.choice(seps) for p in paras)


def check_exact(raw: bytes, passages: list[Passage]) -> None:
    last_end = -1
    for p in passages:
        assert raw[p.start : p.end].decode("utf-8") == p.text
        assert p.text == p.text.strip() and p.text
        assert p.start >= last_end  # in order, never overlapping
        last_end = p.end


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_byte_ranges_slice_the_file_exactly(seed: int, newline: str, bom: bytes) -> None:
    text = corpus(seed, newline)
    raw = bom + text.encode("utf-8")
    passages = chunk(plain_text(raw))
    check_exact(raw, passages)
    # Nothing is lost: every non-space character is in exactly one passage, in order.
    assert "".join(text.split()) == "".join("".join(p.text.split()) for p in passages)
    assert all(word_count(p.text) <= MAX_WORDS for p in passages)


def test_utf8_offsets_count_bytes_per_character() -> None:
    starts, ends = utf8_offsets("aé日🎉", base=3)
    assert starts.tolist() == [3, 4, 6, 9]
    assert ends.tolist() == [4, 6, 9, 13]


def test_small_paragraphs_merge_up_to_the_target() -> None:
    rng = random.Random(1)
    paras = [paragraph(rng, 30) for _ in range(20)]
    raw = "\n\n".join(paras).encode()
    passages = chunk(plain_text(raw))
    check_exact(raw, passages)
    starts = {raw.index(p.encode()) for p in paras}
    for p in passages:
        assert p.start in starts  # every passage starts on a paragraph
        assert MIN_WORDS <= word_count(p.text) <= MAX_WORDS


def test_long_paragraph_splits_on_sentences_into_balanced_pieces() -> None:
    rng = random.Random(2)
    para = paragraph(rng, 600)
    raw = ("Intro line.\n\n" + para).encode()
    passages = chunk(plain_text(raw))
    check_exact(raw, passages)
    sizes = [word_count(p.text) for p in passages]
    assert all(s <= MAX_WORDS for s in sizes) and len(passages) <= 4
    assert min(sizes[1:]) >= 100  # balanced: no tiny tail
    for p in passages:
        assert p.text[-1] in ".!?"  # cut after a sentence


def test_sentence_longer_than_the_limit_splits_on_words() -> None:
    raw = (" ".join(f"wörd{i}" for i in range(600)) + ".").encode()
    passages = chunk(plain_text(raw))
    check_exact(raw, passages)
    assert [word_count(p.text) for p in passages] == [250, 250, 100]


def test_cjk_without_spaces_counts_characters_as_words() -> None:
    text = "".join("東京は日本の首都です。" for _ in range(120))  # 1320 characters, 120 sentences
    raw = text.encode()
    passages = chunk(plain_text(raw))
    check_exact(raw, passages)
    assert len(passages) >= 6
    assert all(word_count(p.text) <= MAX_WORDS and p.text.endswith("。") for p in passages)


def test_enormous_run_without_spaces_is_cut_by_characters() -> None:
    raw = ("short intro\n\n" + "A" * 20000).encode()
    passages = chunk(plain_text(raw))
    check_exact(raw, passages)
    assert max(len(p.text) for p in passages) <= MAX_WORDS * LONG_WORD


def test_last_small_passage_joins_the_one_before() -> None:
    rng = random.Random(3)
    raw = (paragraph(rng, 120) + "\n\n" + paragraph(rng, 120) + "\n\nThe end.").encode()
    passages = chunk(plain_text(raw))
    check_exact(raw, passages)
    assert len(passages) == 2 and passages[-1].text.endswith("The end.")


def test_blank_text_has_no_passages() -> None:
    assert chunk(plain_text(b"")) == []
    assert chunk(plain_text(b" \n\n\t\r\n ")) == []
    assert paragraph_spans("\n\na\n \nb\n") == [(2, 3), (6, 7)]


def test_text_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(NotExtractable, match="not UTF-8"):
        plain_text("café".encode("latin-1"))
