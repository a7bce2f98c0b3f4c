"""Helpers for testing llamay and the code around it: tiny GGUF models the real engine runs,
quantised by llama.cpp's own quantiser."""

from llamay.testing.quantize import QUANTS, quantize_gguf
from llamay.testing.tiny_gguf import (
    CHATML,
    CHATML_THINK,
    ENDOFTEXT,
    EOS_TRIGGER,
    IM_END,
    IM_START,
    THINK_CLOSE,
    THINK_OPEN,
    TinyVocab,
    tiny_vocab,
    write_tiny_llama,
    write_tiny_think_llama,
)

__all__ = [
    "CHATML",
    "CHATML_THINK",
    "ENDOFTEXT",
    "EOS_TRIGGER",
    "IM_END",
    "IM_START",
    "QUANTS",
    "THINK_CLOSE",
    "THINK_OPEN",
    "TinyVocab",
    "quantize_gguf",
    "tiny_vocab",
    "write_tiny_llama",
    "write_tiny_think_llama",
]
