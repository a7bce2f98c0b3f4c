"""llamay: a local LLM server and toolkit for GGUF models, and a Python library.

`import llamay` stays cheap: the library (`llamay.LLM`, `llamay.tool`, the result types)
loads on first use of one of its names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "__version__",
    "LLM",
    "AsyncStream",
    "ChatResult",
    "Chunk",
    "Context",
    "LlamayError",
    "OutputError",
    "ScoreResult",
    "ServerUnreachable",
    "Stream",
    "Timings",
    "Tool",
    "ToolCall",
    "Usage",
    "tool",
]

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .library import (
        LLM,
        AsyncStream,
        ChatResult,
        Chunk,
        Context,
        LlamayError,
        OutputError,
        ScoreResult,
        ServerUnreachable,
        Stream,
        Timings,
        Tool,
        ToolCall,
        Usage,
        tool,
    )


def __getattr__(name: str) -> Any:
    if name in __all__ and name != "__version__":
        from . import library

        value = getattr(library, name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'llamay' has no attribute {name!r}")
