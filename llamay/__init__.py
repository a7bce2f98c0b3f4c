"""llamay: a local LLM server and toolkit for GGUF models."""

__all__ = ["__version__"]

__version__ = "0.1.0"
