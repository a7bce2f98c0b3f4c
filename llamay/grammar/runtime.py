"""Shared llguidance plumbing: the byte tokenizer, resource limits, grammar validation.

Everything that talks to llguidance directly and is not specific to one grammar source
lives here, so the limits and the error mapping are the same for every kind of grammar.
"""

from __future__ import annotations

import functools

import llguidance
import numpy as np

from ..errors import GrammarError

__all__ = [
    "MAX_SOURCE_BYTES",
    "byte_tokenizer",
    "parser_limits",
    "validate_spec",
    "matcher_error",
    "mask_tokens",
    "forbid",
]

# A grammar or schema larger than this is refused before llguidance sees it. llguidance
# itself copes with multi-megabyte schemas, but nothing a client legitimately sends per
# request is that big, and compile time grows with size.
MAX_SOURCE_BYTES = 512 * 1024


@functools.cache
def byte_tokenizer() -> llguidance.LLTokenizer:
    """llguidance's built-in byte tokenizer: ids 0..254 are the bytes 0x00..0xFE, 255..260
    are specials, 261 is EOS. Built once; it needs no model files."""
    return llguidance.LLTokenizer("byte")


def parser_limits() -> llguidance.LLParserLimits:
    """Limits that bound compile time, memory and per-token work for one grammar.

    The values are llguidance's defaults except `verbose_errors` (verbose errors dump the
    parser state and the whole grammar into the message, which is noise for an API caller,
    and large) and `max_items_in_row`: real-world schemas with recursive, many-branched
    definitions (the TextMate grammar schema: 2,723 items after `{"patterns":[{`) exceed
    the default 2,000, and every valid output then ends in a matcher error; the per-mask
    `step_max_items` still bounds the work. Exceeding a limit shows up as a compile error
    (GrammarError) or, while generating, as a matcher error that ends the request.
    """
    return llguidance.LLParserLimits(
        max_items_in_row=10_000,
        initial_lexer_fuel=1_000_000,  # ~20 ms of regex analysis at compile time
        step_lexer_fuel=200_000,  # ~15 ms of lexer work per token at most
        step_max_items=50_000,
        max_lexer_states=250_000,
        max_grammar_size=500_000,
        verbose_errors=False,
    )


def matcher_error(matcher: llguidance.LLMatcher) -> str | None:
    """The matcher's error text, or None if it is healthy."""
    if not matcher.is_error():
        return None
    # Without verbose_errors llguidance still appends an empty "<non-verbose/>" marker.
    return matcher.get_error().replace("<non-verbose/>", "").strip() or "grammar error"


def validate_spec(spec: str, *, what: str, param: str | None) -> None:
    """Compile `spec` without a model tokenizer and raise GrammarError on any error.

    Tokenizer-independent validation catches every schema/grammar error; errors that
    depend on the model vocabulary (an unknown named special token, lexer limits hit only
    with a large vocabulary) surface later, from `CompileCache.get`.
    """
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
        spec, None, limits=parser_limits()
    )
    if is_error:
        raise GrammarError(f"invalid {what}: {messages[0].strip()}", param=param)


def mask_tokens(mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """The token ids a packed mask (one bit per token, as llguidance writes it) allows,
    lowest first, below `vocab_size`."""
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:vocab_size])


def forbid(mask: np.ndarray, token: int) -> None:
    """Clear `token`'s bit in a packed mask, in place."""
    words = mask.view(np.uint32)
    words[token >> 5] &= np.uint32(~(1 << (token & 31)) & 0xFFFFFFFF)
