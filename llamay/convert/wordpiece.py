"""A BERT WordPiece tokenizer, as llama.cpp's "bert" (WPM) tokenizer wants it in a GGUF file.

llama.cpp does its own WordPiece pass (lower-casing, punctuation splitting) over a token list in
"phantom space" form: a token that starts a word carries a leading U+2581, a continuation piece
("##ing") loses its "##", and control tokens ([CLS], [SEP], ...) stay as they are.  Special token
ids and the add-BOS/EOS flags come from the folder's tokenizer files, read with the `gguf`
package's own `SpecialVocab`, so they match what llama.cpp's converter writes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import gguf

from llamay.convert.hf import read_json

__all__ = ["WordPieceVocab", "read_wordpiece"]

#: The special tokens every BERT vocabulary has, by the `SpecialVocab` role they fill.
_BERT_SPECIALS = {"unk": "[UNK]", "sep": "[SEP]", "pad": "[PAD]", "cls": "[CLS]", "mask": "[MASK]"}
_WORD_START = "\u2581"
#: Special-token roles GGUF has a key for.  There is no CLS key: llama.cpp's BOS is BERT's [CLS].
_GGUF_ROLES = ("bos", "eos", "unk", "sep", "pad", "mask")


@dataclass
class WordPieceVocab:
    """What goes into the GGUF: `tokens` (phantom-space form) and their `token_types`, one per
    embedding row, the special token ids by role (bos, eos, unk, sep, pad, cls, mask) and the
    add-special flags (bos, eos, sep)."""

    tokens: list[str]
    token_types: list[int]
    special_ids: dict[str, int] = field(default_factory=dict)
    add_special: dict[str, bool] = field(default_factory=dict)

    def write(self, writer: gguf.GGUFWriter, type_vocab_size: int) -> None:
        """Adds the tokenizer keys to `writer` (WordPiece model "bert", pre-tokenizer "default":
        llama.cpp ignores the pre-tokenizer name for WordPiece)."""
        writer.add_tokenizer_model("bert")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(self.tokens)
        writer.add_token_types(self.token_types)
        # llama.cpp checks the token-type embedding rows against this (and then uses row 0 only).
        writer.add_token_type_count(type_vocab_size)
        for role in _GGUF_ROLES:
            if role in self.special_ids:
                getattr(writer, f"add_{role}_token_id")(self.special_ids[role])
        for role, flag in self.add_special.items():
            getattr(writer, f"add_add_{role}_token")(flag)


def _read_vocab(src: Path) -> tuple[dict[int, str], dict[int, bool]]:
    """Token text by id, and for the tokenizer's added tokens whether each one is special."""
    tokenizer_json = src / "tokenizer.json"
    if tokenizer_json.is_file():
        data = read_json(tokenizer_json)
        model = data.get("model") or {}
        if model.get("type") != "WordPiece":
            raise ValueError(
                f"{tokenizer_json}: tokenizer model is {model.get('type')!r}, expected 'WordPiece'"
            )
        if (data.get("normalizer") or {}).get("lowercase") is False:
            raise ValueError(_CASED.format(src=src))
        by_id = {int(i): str(t) for t, i in model.get("vocab", {}).items()}
        added = {int(a["id"]): bool(a.get("special")) for a in data.get("added_tokens", [])}
        for a in data.get("added_tokens", []):
            by_id[int(a["id"])] = str(a["content"])
        return by_id, added
    vocab_txt = src / "vocab.txt"
    if vocab_txt.is_file():
        lines = vocab_txt.read_text(encoding="utf-8").splitlines()
        by_id = dict(enumerate(lines))
        # vocab.txt has no notion of added tokens: the standard BERT specials are the special ones.
        added = {i: True for i, t in by_id.items() if t in _BERT_SPECIALS.values()}
        return by_id, added
    raise ValueError(f"{src}: missing tokenizer.json and vocab.txt (a WordPiece tokenizer is needed)")


_CASED = (
    "{src}: a cased WordPiece tokenizer is not supported: llama.cpp lower-cases all input, so a "
    "cased vocabulary would be matched wrongly"
)


def read_wordpiece(src: Path, n_vocab: int) -> WordPieceVocab:
    """The WordPiece vocabulary of the folder `src`, padded to `n_vocab` rows (the embedding
    matrix may be larger than the tokenizer; llama.cpp needs one token per row).

    ValueError if the folder has no WordPiece tokenizer, the tokenizer is larger than the
    embedding matrix, the tokenizer is cased (llama.cpp always lower-cases), or [CLS]/[SEP]
    cannot be found (embedding and rank inputs need both)."""
    config_path = src / "tokenizer_config.json"
    if config_path.is_file() and read_json(config_path).get("do_lower_case") is False:
        raise ValueError(_CASED.format(src=src))
    by_id, added = _read_vocab(src)
    if not by_id:
        raise ValueError(f"{src}: the tokenizer has an empty vocabulary")
    if max(by_id) >= n_vocab:
        raise ValueError(
            f"{src}: tokenizer has token id {max(by_id)}, but the embedding matrix has {n_vocab} rows"
        )
    tokens: list[str] = []
    types: list[int] = []
    for i in range(n_vocab):
        text = by_id.get(i)
        if text is None:
            text, kind = f"[PAD{i}]", gguf.TokenType.UNUSED
        elif i in added:
            kind = gguf.TokenType.CONTROL if added[i] else gguf.TokenType.USER_DEFINED
        else:
            kind = gguf.TokenType.NORMAL
        types.append(kind)
        # Everything but control tokens goes into phantom-space form, as llama.cpp's converter does.
        if kind == gguf.TokenType.CONTROL:
            tokens.append(text)
        else:
            tokens.append(text[2:] if text.startswith("##") else _WORD_START + text)

    # SpecialVocab logs a warning per oddity in the tokenizer files; the converter's caller only
    # wants errors, which are raised below.
    logger = logging.getLogger("gguf.vocab")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        special = gguf.SpecialVocab(src, n_vocab=n_vocab)
    finally:
        logger.setLevel(level)
    ids = dict(special.special_token_ids)
    flags = dict(special.add_special_token)

    # A folder with only vocab.txt gives SpecialVocab nothing: find the specials by their text.
    index = {t: i for i, t in by_id.items()}
    for role, text in _BERT_SPECIALS.items():
        if role not in ids and text in index:
            ids[role] = index[text]
    for role in ("cls", "sep"):
        if role not in ids:
            raise ValueError(f"{src}: the tokenizer has no {_BERT_SPECIALS[role]} token")
    # BERT frames a text as [CLS] text [SEP]; llama.cpp adds its BOS and EOS around a text.
    ids.setdefault("bos", ids["cls"])
    ids.setdefault("eos", ids["sep"])
    flags.setdefault("bos", True)
    flags.setdefault("eos", True)
    return WordPieceVocab(tokens, types, ids, flags)
