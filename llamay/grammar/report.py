"""The report on an output whose JSON schema was not enforced in full while sampling."""

from __future__ import annotations

import json
from typing import Any

from . import Grammar

__all__ = ["check", "MAX_ERRORS"]

MAX_ERRORS = 20


def check(grammar: Grammar | None, text: str, *, complete: bool) -> dict[str, Any] | None:
    """The report on an output whose schema was not enforced in full, else None.

    `{"unenforced": ["uniqueItems at /tags", ...], "valid": bool, "errors": [...]}`:
    `valid` says whether the output satisfies the whole schema. An output cut short
    (`complete` false, e.g. by max_tokens) is reported invalid without parsing.
    Runs a real validator: call it from a worker thread, not the event loop.
    """
    if grammar is None or grammar.schema is None or not grammar.unenforced:
        return None
    errors: list[str]
    if not complete:
        errors = ["the output is incomplete, so it was not validated"]
    else:
        try:
            value = json.loads(text)
        except ValueError as exc:
            errors = [f"the output is not JSON: {exc}"]
        else:
            from .validate import validate

            errors = validate(grammar.schema, value)[:MAX_ERRORS]
    return {"unenforced": list(grammar.unenforced), "valid": not errors, "errors": errors}
