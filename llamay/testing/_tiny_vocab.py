"""The byte-level BPE vocabulary of the tiny test models (see ``llamay.testing.tiny_gguf``).

GPT-2 style: every byte is a token (spelt through GPT-2's byte -> printable character map), plus a
few hundred merges learnt from a small English corpus, so ordinary text tokenizes into multi-byte
tokens the way it would with a real vocabulary, plus the ChatML special tokens.
"""

from __future__ import annotations

import functools
import heapq
import re
from collections import Counter
from dataclasses import dataclass

import gguf

__all__ = ["ENDOFTEXT", "IM_END", "IM_START", "TinyVocab", "tiny_vocab"]

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
_N_MERGES = 300

# English the merges are learnt from: the commonest words plus chat-ish sentences, so prompts
# tokenize into multi-byte tokens the way they would with a real vocabulary.
_CORPUS = """
Hello! Hi there. How are you today? I am fine, thank you. You are a helpful assistant.
The user asked a question and the assistant gave an answer. Please write a short story about a
cat and a dog. What is the capital of France? Paris is the capital of France. Tell me a joke.
Once upon a time there was a little girl who lived in a house near the forest with her mother.
the of and to in is it you that he was for on are with as his they be at one have this from or had
by hot word but what some we can out other were all there when up use your how said an each she
which do their time if will way about many then them write would like so these her long make
thing see him two has look more day could go come did number sound no most people my over know
water than call first who may down side been now find any new work part take get place made live
where after back little only round man year came show every good me give our under name very
through just form sentence great think say help low line differ turn cause much mean before move
right boy old too same tell does set three want air well also play small end put home read hand
port large spell add even land here must big high such follow act why ask men change went light
kind off need house picture try us again animal point mother world near build self earth father
head stand own page should country found answer school grow study still learn plant cover food
sun four between state keep eye never last let thought city tree cross farm hard start might
story saw far sea draw left late run don't while press close night real life few north open seem
together next white children begin got walk example ease paper group always music those both
mark often letter until mile river car feet care second book carry took science eat room friend
began idea fish mountain stop once base hear horse cut sure watch color face wood main enough
plain girl usual young ready above ever red list though feel talk bird soon body dog family
direct leave song measure door product black short class wind question happen complete ship
area half rock order fire south problem piece told knew pass since top whole king space heard
best hour better true during hundred five remember step early hold west ground interest reach
fast sing listen six table travel less morning ten simple several toward war lay against
pattern slow center love person money serve appear road map rain rule pull cold notice voice
"""

# llama.cpp's "smollm" pre-tokenizer (GPT-2's, with every digit on its own) for ASCII text.
_PRE_TOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


@functools.cache
def _byte_to_unicode() -> tuple[str, ...]:
    """GPT-2's byte -> printable character map: index = byte value."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return tuple(table[b] for b in range(256))


def _encode_bytes(text: str) -> str:
    """Text -> its GGUF (byte-level unicode) spelling."""
    table = _byte_to_unicode()
    return "".join(table[b] for b in text.encode("utf-8"))


@functools.cache
def token_bytes(token: str) -> bytes:
    """GGUF (byte-level unicode) spelling -> bytes; special tokens come back as their UTF-8 text."""
    table = {c: b for b, c in enumerate(_byte_to_unicode())}
    if all(c in table for c in token):
        return bytes(table[c] for c in token)
    return token.encode("utf-8")


@functools.cache
def _learn_merges(n_merges: int) -> tuple[tuple[str, str], ...]:
    """Byte-level BPE merges learnt from ``_CORPUS``; ties break on the pair text, so it is stable.

    Pair counts are updated incrementally (heap with stale entries skipped): recounting every pair
    for every merge took half a second, and tests write models at collection time.
    """
    words = Counter(_encode_bytes(w) for w in _PRE_TOKEN.findall(" ".join(_CORPUS.split())))
    words[_encode_bytes("\n\n")] += 40  # paragraph breaks: chat templates and the think path use them
    syms = [list(w) for w in words]
    freqs = list(words.values())
    counts: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], set[int]] = {}
    for wi, word in enumerate(syms):
        for pair in zip(word, word[1:], strict=False):
            counts[pair] += freqs[wi]
            where.setdefault(pair, set()).add(wi)
    heap = [(-n, pair) for pair, n in counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    while heap and len(merges) < n_merges:
        neg, best = heapq.heappop(heap)
        if counts[best] != -neg or not -neg:
            continue  # stale entry; the current count was pushed separately
        merges.append(best)
        joined = best[0] + best[1]
        touched: set[tuple[str, str]] = set()
        for wi in sorted(where.pop(best, ())):
            old = syms[wi]
            for pair in zip(old, old[1:], strict=False):
                counts[pair] -= freqs[wi]
                touched.add(pair)
            new: list[str] = []
            i = 0
            while i < len(old):
                if i + 1 < len(old) and (old[i], old[i + 1]) == best:
                    new.append(joined)
                    i += 2
                else:
                    new.append(old[i])
                    i += 1
            syms[wi] = new
            for pair in zip(new, new[1:], strict=False):
                counts[pair] += freqs[wi]
                where.setdefault(pair, set()).add(wi)
                touched.add(pair)
        for pair in touched - {best}:
            heapq.heappush(heap, (-counts[pair], pair))
    return tuple(merges)


def _bpe(word: str, merges: tuple[str, ...]) -> list[str]:
    """GGUF-spelt pieces of one pre-token: apply the best-ranked merge until none applies."""
    ranks = _ranks(merges)
    syms = list(_encode_bytes(word))
    while len(syms) > 1:
        rank, i = min(
            (ranks.get((a, b), len(ranks)), i) for i, (a, b) in enumerate(zip(syms, syms[1:], strict=False))
        )
        if rank == len(ranks):
            break
        syms[i : i + 2] = [syms[i] + syms[i + 1]]
    return syms


@functools.cache
def _ranks(merges: tuple[str, ...]) -> dict[tuple[str, str], int]:
    return {(m.split(" ")[0], m.split(" ")[1]): r for r, m in enumerate(merges)}


@dataclass(frozen=True)
class TinyVocab:
    """The tiny models' vocabulary, in GGUF order.

    ``tokens`` are GGUF spellings (bytes through GPT-2's byte map; special tokens verbatim),
    ``token_types`` are ``gguf.TokenType`` values and ``merges`` are "left right" strings.
    Ids 0-2 are ``<|endoftext|>``, ``<|im_start|>`` and ``<|im_end|>``, then the 256 byte tokens in
    byte order, then the merged tokens, then the extra tokens, so the shared ids do not depend on
    the extras.
    """

    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]

    def id(self, text: str) -> int:
        """Id of the single token whose text is ``text`` (special token or plain text)."""
        try:
            return self.tokens.index(text)
        except ValueError:
            return self.tokens.index(_encode_bytes(text))

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        """Token ids of ASCII ``text`` with no special tokens in it, as llama.cpp tokenizes it."""
        if not text.isascii():
            raise ValueError("TinyVocab.encode only pre-tokenizes ASCII text")
        ids = {t: i for i, t in enumerate(self.tokens)}
        return [ids[piece] for word in _PRE_TOKEN.findall(text) for piece in _bpe(word, self.merges)]


@functools.cache
def tiny_vocab(extra_tokens: tuple[str, ...] = (), user_tokens: tuple[str, ...] = ()) -> TinyVocab:
    """The vocabulary ``write_tiny_llama`` writes for these extra control and user-defined tokens."""
    merges = _learn_merges(_N_MERGES)
    tokens = [ENDOFTEXT, IM_START, IM_END, *_byte_to_unicode(), *(a + b for a, b in merges)]
    types = [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.NORMAL] * (len(tokens) - 3)
    for text in (*extra_tokens, *user_tokens):
        if text in tokens:
            raise ValueError(f"token {text!r} is already in the vocabulary")
        tokens.append(text)
    types += [gguf.TokenType.CONTROL] * len(extra_tokens) + [gguf.TokenType.USER_DEFINED] * len(user_tokens)
    return TinyVocab(tuple(tokens), tuple(int(t) for t in types), tuple(f"{a} {b}" for a, b in merges))
