"""POST /v1/redact: rule-based detectors, plus an optional second opinion from a local model."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..chat.flow import ChatOptions
from ..chat.pipeline import RunSpec, chat_prompt, start
from ..errors import InvalidRequest
from ..grammar import Grammar
from ..redact import DETECTORS, STYLES, Detector, Finding, Span, redact
from ..runtime import LoadedModel
from ..types import SamplingParams
from .fields import Fields
from .http import json_response, read_json
from .state import state_of

__all__ = ["redact_routes", "MODEL_TYPES"]

MAX_TEXT = 1_000_000
MODEL_TYPES = ("PERSON", "ADDRESS", "ORGANIZATION")
SPAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spans": {
            "type": "array",
            "maxItems": 64,
            "items": {
                "type": "object",
                "properties": {
                    "type": {"enum": list(MODEL_TYPES)},
                    "text": {"type": "string", "maxLength": 200},
                },
                "required": ["type", "text"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["spans"],
    "additionalProperties": False,
}
INSTRUCTION = (
    "List every person's name, street address and organisation name that appears in the user's text. "
    "Copy each one exactly as written. Answer with JSON."
)


async def redact_route(request: Request) -> Response:
    f = Fields(await read_json(request))
    text = f.text("text", required=True)
    if len(text) > MAX_TEXT:
        raise InvalidRequest(f"'text' is longer than {MAX_TEXT} characters", param="text")
    types = f.raw("types")
    if types is not None and (not isinstance(types, list) or not all(isinstance(t, str) for t in types)):
        raise InvalidRequest("'types' must be an array of type names", param="types")
    style = f.text("style", "type")
    if style not in STYLES:
        raise InvalidRequest(f"'style' must be one of {', '.join(STYLES)}", param="style")
    model_name = f.text("model")
    registry: dict[str, Detector] = dict(DETECTORS)
    model_types = [t for t in MODEL_TYPES if types is None or t in types]
    rule_types = None if types is None else [t for t in types if t not in MODEL_TYPES]
    if model_name is not None and model_types:
        lm = await state_of(request).runtime.use(model_name)
        spans = await model_spans(lm, text)
        for t in model_types:
            registry[t] = Detector(t, _finder([n for kind, n in spans if kind == t]), "local model")
        wanted: list[str] | None = (list(DETECTORS) if rule_types is None else rule_types) + model_types
    else:
        wanted = rule_types
    # Up to a megabyte of text through every detector: CPU work, off the event loop.
    result = await asyncio.to_thread(redact, text, wanted, style, detectors=registry)  # type: ignore[arg-type]
    findings = [
        Finding(fd.type, fd.start, fd.end, "model" if fd.type in MODEL_TYPES else "rules")
        for fd in result.findings
    ]
    body: dict[str, Any] = {
        "object": "redaction",
        "text": result.text,
        "findings": [x.to_dict() for x in findings],
    }
    if model_name is not None:
        body["note"] = "findings with source 'model' are a second opinion from a local model, not a guarantee"
    return json_response(body)


async def model_spans(lm: LoadedModel, text: str) -> list[tuple[str, str]]:
    """(type, text) pairs the model names, under a JSON schema, at temperature 0."""
    grammar = Grammar.from_json_schema(SPAN_SCHEMA)
    opts = ChatOptions(
        messages=[{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": text}],
        grammar=grammar,
        thinking=False,
    )
    prompt = await asyncio.to_thread(chat_prompt, lm, opts)
    budget = max(64, min(2048, lm.engine.n_ctx - len(prompt.tokens) - 1))
    spec = RunSpec(sampling=SamplingParams(temperature=0), max_tokens=budget)
    (answer,) = await (await start(lm, prompt, spec)).collect()
    if answer.reason != "stop":
        return []
    try:
        data = json.loads(answer.content)
    except ValueError:
        return []
    return [(s["type"], s["text"]) for s in data.get("spans", []) if len(s["text"].strip()) >= 2]


def _finder(needles: list[str]) -> Callable[[str], Iterable[Span]]:
    """A detector function finding every occurrence of the model's spans (exact text)."""

    def find(text: str) -> Iterable[Span]:
        for needle in needles:
            for m in re.finditer(re.escape(needle.strip()), text):
                yield Span(m.start(), m.end(), needle.strip().lower())

    return find


def redact_routes() -> list[Route]:
    return [Route("/v1/redact", redact_route, methods=["POST"])]
