"""Texts, token arrays and query/document pairs -> the token sequences an `Encoder` takes.

Every sequence is checked here, per input, before it can reach llama.cpp (which aborts the
process on a sequence longer than the model's positions): an over-long input is a
`ContextOverflow` (HTTP 400) naming the input, unless truncation was asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ContextOverflow, InvalidRequest
from .service import Encoder

__all__ = ["Input", "fit", "frame", "input_sequences", "pair_sequence", "text_sequence"]

#: One input: a text, or token ids of the encoder's own vocabulary.
Input = str | list[int]


def text_sequence(encoder: Encoder, text: str) -> list[int]:
    """`text` tokenized and framed as the model frames a text (BERT: ``[CLS] text [SEP]``).
    Special-token text inside `text` ("[SEP]") stays plain text."""
    return encoder.model.tokenize(text, add_special=True, parse_special=False)


def frame(encoder: Encoder, ids: Sequence[int]) -> list[int]:
    """Token ids framed like a text: BOS prepended and EOS appended where the model adds them
    and `ids` does not already start / end with them (so pre-framed arrays stay as they are)."""
    out = list(ids)
    if encoder.add_bos and encoder.bos_id >= 0 and (not out or out[0] != encoder.bos_id):
        out.insert(0, encoder.bos_id)
    if encoder.add_eos and encoder.eos_id >= 0 and (len(out) < 2 or out[-1] != encoder.eos_id):
        out.append(encoder.eos_id)
    return out


def fit(encoder: Encoder, ids: list[int], truncate: bool, where: str) -> list[int]:
    """`ids` if it fits the encoder (`max_tokens`); else cut to fit when `truncate` (keeping a
    final EOS, as Hugging Face truncation keeps [SEP]) or ContextOverflow naming `where`."""
    limit = encoder.max_tokens
    if len(ids) <= limit:
        return ids
    if not truncate:
        raise ContextOverflow(
            f"{where} has {len(ids)} tokens, more than the {limit} the model {encoder.name} takes; "
            'shorten it, or send "truncate": true to cut it to fit',
            param=where,
        )
    if encoder.add_eos and ids[-1] == encoder.eos_id and limit > 1:
        return [*ids[: limit - 1], ids[-1]]
    return ids[:limit]


def _token_array(encoder: Encoder, value: list[int], where: str) -> list[int]:
    if not value:
        raise InvalidRequest(f"{where} is an empty token array", param=where)
    n_vocab = encoder.model.n_vocab
    for t in value:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n_vocab:
            raise InvalidRequest(
                f"{where} holds {t!r}, not a token id of the model {encoder.name} (0..{n_vocab - 1})",
                param=where,
            )
    return frame(encoder, value)


def input_sequences(
    encoder: Encoder, inputs: Sequence[Input], truncate: bool, param: str = "input", *, indexed: bool = True
) -> list[list[int]]:
    """One framed, length-checked sequence per input.  Errors name the input as
    ``param[i]`` (or just `param` when `indexed` is False, for a lone input): InvalidRequest
    for a bad token array, an empty sequence, ContextOverflow for an over-long input."""
    seqs: list[list[int]] = []
    for i, item in enumerate(inputs):
        where = f"{param}[{i}]" if indexed else param
        if isinstance(item, str):
            ids = text_sequence(encoder, item)
        elif isinstance(item, list):
            ids = _token_array(encoder, item, where)
        else:
            raise InvalidRequest(f"{where} must be a string or an array of token ids", param=where)
        if not ids:
            raise InvalidRequest(
                f"{where} is empty: the model {encoder.name} adds no tokens to it", param=where
            )
        seqs.append(fit(encoder, ids, truncate, where))
    return seqs


def pair_sequence(encoder: Encoder, query: list[int], document: str, truncate: bool, where: str) -> list[int]:
    """A cross-encoder input, ``[BOS] query [EOS] document [EOS]`` (BERT: [CLS] q [SEP] d [SEP]),
    from the query's unframed tokens and the document text.  When it is too long, `truncate`
    shortens the document; ContextOverflow names `where` (the document) otherwise, or "query"
    when the query alone leaves no room for a document."""
    doc = encoder.model.tokenize(document, add_special=False, parse_special=False)
    frame_len = 3
    room = encoder.max_tokens - frame_len - len(query)
    if room < 1:
        raise ContextOverflow(
            f"query has {len(query)} tokens, leaving no room for a document in the "
            f"{encoder.max_tokens} tokens the model {encoder.name} takes",
            param="query",
        )
    if len(doc) > room:
        if not truncate:
            raise ContextOverflow(
                f"{where} with the query makes {len(doc) + len(query) + frame_len} tokens, more than "
                f"the {encoder.max_tokens} the model {encoder.name} takes; shorten it, or send "
                '"truncate": true',
                param=where,
            )
        doc = doc[:room]
    return [encoder.bos_id, *query, encoder.eos_id, *doc, encoder.eos_id]
