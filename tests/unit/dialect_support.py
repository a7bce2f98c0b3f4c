"""Test support for the tool-call dialects: llama.cpp's chat templates and tokenizers,
read from the copy of its `models/` folder kept beside the engine's wheel cache (or
`$LLAMAY_LLAMA_CPP_MODELS`), and a "random weights" walk through a grammar.

The tokenizers are read straight from the `ggml-vocab-*.gguf` files (no weights, no
llama.cpp): token bytes, special tokens and EOS are enough for llguidance to compile a
grammar against the real vocabulary and for the walk to pick real tokens. A family whose
own tokenizer is not in llama.cpp's tree gets a stand-in with the family's markers added
as special tokens, as its real tokenizer has them.
"""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llguidance
import numpy as np

from llamay.grammar import Constraint, Grammar
from llamay.grammar.constraint import CompileCache, allocate_mask

LLAMA_CPP_VERSION = "0.3.36"


def models_dir() -> Path:
    """llama.cpp's `models/` folder (templates and vocabularies)."""
    env = os.environ.get("LLAMAY_LLAMA_CPP_MODELS")
    if env:
        return Path(env)
    wheels = Path(os.environ.get("LLAMAY_WHEEL_CACHE", Path.home() / ".cache/llamay/wheels"))
    root = wheels / f"llama.cpp-{LLAMA_CPP_VERSION}-models"
    if not (root / "templates").is_dir():
        raise FileNotFoundError(
            f"{root} is missing: set LLAMAY_LLAMA_CPP_MODELS to llama.cpp's models/ folder "
            f"(from the llama-cpp-python {LLAMA_CPP_VERSION} source) or run ./setup.sh"
        )
    return root


@functools.cache
def template(stem: str) -> str:
    return (models_dir() / "templates" / f"{stem}.jinja").read_text(encoding="utf-8")


# -- GGUF key/value reading (only what a tokenizer needs) -----------------------------

_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_FORMATS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}


def _read_kv(path: Path, wanted: set[str]) -> dict[str, Any]:
    data = path.read_bytes()
    magic, _version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    assert magic == b"GGUF"
    pos = 24
    out: dict[str, Any] = {}

    def string(at: int) -> tuple[bytes, int]:
        (n,) = struct.unpack_from("<Q", data, at)
        return data[at + 8 : at + 8 + n], at + 8 + n

    def value(kind: int, at: int, keep: bool) -> tuple[Any, int]:
        if kind == 8:
            s, at = string(at)
            return s, at
        if kind == 9:
            item, count = struct.unpack_from("<IQ", data, at)
            at += 12
            if item == 8:
                items = []
                for _ in range(count):
                    (n,) = struct.unpack_from("<Q", data, at)
                    if keep:
                        items.append(data[at + 8 : at + 8 + n])
                    at += 8 + n
                return items, at
            size = _SIZES[item]
            arr = (
                np.frombuffer(data, dtype=_FORMATS[item].replace("<", "<"), count=count, offset=at)
                if keep
                else None
            )
            return arr, at + size * count
        (v,) = struct.unpack_from(_FORMATS[kind], data, at)
        return v, at + _SIZES[kind]

    for _ in range(n_kv):
        key, pos = string(pos)
        (kind,) = struct.unpack_from("<I", data, pos)
        name = key.decode()
        v, pos = value(kind, pos + 4, name in wanted)
        if name in wanted:
            out[name] = v
    return out


def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable character -> byte map, inverted."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


@dataclass(eq=False)
class Vocab:
    """A real tokenizer's tokens as bytes, its special tokens and EOS, as llguidance sees
    them; `special` is the pipeline's `Model.special_id` for it."""

    name: str
    tokens: list[bytes]
    specials: dict[str, int]
    eos: int
    ll: Any = field(init=False)
    cache: CompileCache = field(init=False)

    def __post_init__(self) -> None:
        special_ids = set(self.specials.values())
        self._by_bytes = {t: i for i, t in enumerate(self.tokens) if i not in special_ids}
        self._longest = max(len(t) for t in self._by_bytes)
        self.ll = llguidance.LLTokenizer(llguidance.TokenizerWrapper(self))
        self.cache = CompileCache(self.ll)

    # what llguidance.TokenizerWrapper reads
    @property
    def eos_token_id(self) -> int:
        return self.eos

    @property
    def bos_token_id(self) -> int | None:
        return None

    @property
    def special_token_ids(self) -> list[int]:
        return sorted(self.specials.values())

    def __call__(self, data: bytes) -> list[int]:
        """Greedy longest-match tokenization (good enough for tests)."""
        out, at = [], 0
        while at < len(data):
            for n in range(min(self._longest, len(data) - at), 0, -1):
                tok = self._by_bytes.get(data[at : at + n])
                if tok is not None:
                    out.append(tok)
                    at += n
                    break
            else:
                raise ValueError(f"no token for byte {data[at]}")
        return out

    def special(self, text: str) -> int | None:
        return self.specials.get(text)

    def text(self, ids: list[int]) -> str:
        return b"".join(self.tokens[i] for i in ids).decode("utf-8", errors="replace")


@functools.cache
def vocab(name: str, extra: tuple[str, ...] = ()) -> Vocab:
    """`ggml-vocab-<name>.gguf`, with `extra` special tokens added where it lacks them."""
    base, base_specials, eos = _base_vocab(name)
    tokens, specials = list(base), dict(base_specials)
    for text in extra:
        if text not in specials:
            specials[text] = len(tokens)
            tokens.append(text.encode())
    return Vocab(name, tokens, specials, eos)


@functools.cache
def _base_vocab(name: str) -> tuple[list[bytes], dict[str, int], int]:
    kv = _read_kv(
        models_dir() / f"ggml-vocab-{name}.gguf",
        {
            "tokenizer.ggml.model",
            "tokenizer.ggml.tokens",
            "tokenizer.ggml.token_type",
            "tokenizer.ggml.eos_token_id",
        },
    )
    model = kv["tokenizer.ggml.model"].decode()
    raw: list[bytes] = kv["tokenizer.ggml.tokens"]
    types = kv["tokenizer.ggml.token_type"]
    decoder = _byte_decoder()
    tokens: list[bytes] = []
    specials: dict[str, int] = {}
    for i, t in enumerate(raw):
        text = t.decode("utf-8", errors="replace")
        if int(types[i]) in (3, 4):  # control, user-defined
            specials.setdefault(text, i)
            tokens.append(t)
        elif model == "gpt2":
            tokens.append(bytes(decoder.get(c, ord("?")) for c in text))
        elif text.startswith("<0x") and text.endswith(">") and len(text) == 6:
            tokens.append(bytes([int(text[3:5], 16)]))
        else:
            tokens.append(text.replace("▁", " ").encode())
    return tokens, specials, int(kv["tokenizer.ggml.eos_token_id"])


def _words(flags: np.ndarray, n_words: int) -> np.ndarray:
    """Booleans per token as the mask's uint32 words (bit t%32 of word t//32)."""
    padded = np.zeros(n_words * 32, dtype=bool)
    padded[: flags.size] = flags
    return np.packbits(padded, bitorder="little").view(np.uint32)


@functools.cache
def _walk_words(v: Vocab, n_words: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(special tokens, one-ASCII-character tokens, EOS) as mask words."""
    special = np.zeros(len(v.tokens), dtype=bool)
    special[list(v.specials.values())] = True
    short = np.array([len(t) == 1 and t[0] < 0x80 for t in v.tokens])
    eos = np.zeros(len(v.tokens), dtype=bool)
    eos[v.eos] = True
    return _words(special, n_words), _words(short, n_words), _words(eos, n_words)


def _pick(words: np.ndarray, rng: np.random.Generator) -> int:
    """A uniformly random set bit of `words` (there is one)."""
    counts = np.bitwise_count(words).astype(np.int64)
    r = int(rng.integers(int(counts.sum())))
    cum = np.cumsum(counts)
    w = int(np.searchsorted(cum, r, side="right"))
    r -= int(cum[w - 1]) if w else 0
    bits = int(words[w])
    for b in range(32):
        if bits >> b & 1:
            if r == 0:
                return w * 32 + b
            r -= 1
    raise AssertionError("no bit")


def random_walk(
    grammar: Grammar,
    v: Vocab,
    seed: int,
    *,
    max_tokens: int = 3000,
    prefix: str = "",
    force: tuple[int, int] | None = None,
    stop: float = 0.5,
) -> tuple[str, bool]:
    """What a model with random weights writes under `grammar`: each step a random
    allowed token; an ordinary one whenever one is allowed, except one time in five
    where a special token is allowed too (random weights give control tokens no
    preference; without those odds a choice between another call and the closing marker
    would never close); half the time a one-character ASCII one (so strings and runs end
    in a few hundred steps instead of tens of thousands); ending with probability `stop`
    wherever the grammar allows EOS. `prefix`: text the model wrote first (consumed, not sampled). `force`
    (step, token): from that step on the token is taken as soon as it is allowed, once
    (a thinking budget closing the think block). Returns (text, ended within
    max_tokens)."""
    rng = np.random.default_rng(seed)
    c = Constraint(grammar, v.cache)
    ids: list[int] = []
    for t in v(prefix.encode()) if prefix else []:
        assert c.consume(t), (prefix, c.error)
        ids.append(t)
    mask = allocate_mask(v.ll)
    special, short, eos = _walk_words(v, mask.size)
    for step in range(max_tokens):
        if c.is_stopped() or (c.is_accepting() and rng.random() < stop):
            return v.text(ids), True
        c.fill_mask(mask)
        allowed = mask.view(np.uint32) & ~eos
        if force is not None and step >= force[0] and allowed[force[1] // 32] >> (force[1] % 32) & 1:
            tok, force = force[1], None
        else:
            plain = allowed & ~special
            pool = plain if plain.any() else allowed
            if rng.random() < 0.2 and (allowed & special).any():
                pool = allowed & special
            elif rng.random() < 0.5 and (plain & short).any():
                pool = plain & short
            if not pool.any():
                return v.text(ids), c.is_accepting()
            tok = _pick(pool, rng)
        assert c.consume(tok), c.error
        ids.append(tok)
    return v.text(ids), False
