"""Chat prompt construction: rendering a model's Jinja chat template."""

from .template import CHATML_TEMPLATE, ChatTemplate, normalize_messages

__all__ = ["CHATML_TEMPLATE", "ChatTemplate", "normalize_messages"]
