"""The Python library: `llamay.LLM` and what it takes and returns.

    import llamay
    llm = llamay.LLM()                 # the default model, in this process
    print(llm.chat("Say hello.").text)

See docs/library.md.
"""

from ..errors import LlamayError
from .context import Context
from .errors import OutputError, ServerUnreachable
from .llm import LLM, AsyncStream, Stream
from .results import ChatResult, Chunk, ScoreResult, Timings, ToolCall, Usage
from .schema import output_spec
from .tools import Tool, tool

__all__ = [
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
    "output_spec",
    "tool",
]
