"""POST /api/chat and /api/generate: the shared chat pipeline, in Ollama's NDJSON shapes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...chat.flow import ChatOptions, effort_budget
from ...chat.pipeline import Prompt, run
from ...chat.prepare import ChatInput, Env, FimInput, Input, Job, ModelRef, TextInput, prepare, text_prompt
from ...chat.tools import ToolChoice
from ...errors import Forbidden, InvalidRequest
from ...runtime import MANAGE_MODELS, LoadedModel
from ..http import read_json, respond
from ..state import state_of
from . import adapter
from .common import loaded_alias, runtime_feature, use_model
from .gotemplate import render_template
from .reply import OllamaRenderer
from .schemas import Common, OllamaGenerate, OllamaKnobs, parse_chat, parse_generate

__all__ = ["chat", "generate"]

log = logging.getLogger("llamay.api.ollama")


@dataclass(frozen=True)
class TemplateInput(TextInput):
    """/api/generate's own `template` (Go's text/template: .System, .Prompt) rendered into
    plain text. `system` None takes the model's own when `model_system`."""

    template: str = ""
    system: str | None = None
    model_system: bool = False

    @property
    def wants_system(self) -> bool:
        return self.model_system

    def prompt(self, lm: LoadedModel, env: Env) -> Prompt:
        system = self.system or (env.system if self.model_system else None)
        assert isinstance(self.text, str)
        text = render_template(self.template, system=system or "", prompt=self.text)
        return text_prompt(lm, text, self.grammar, prefix=self.prefix)


def _model(c: Common) -> ModelRef:
    return ModelRef(c.model, keep_alive=c.keep_alive, loose_tag=True)


async def chat(request: Request) -> Response:
    t0 = time.perf_counter()
    # Parsing compiles schemas and tool specs: CPU work, off the event loop.
    req = await asyncio.to_thread(parse_chat, await read_json(request))
    c = req.common
    if not req.messages:
        return await _load_or_unload(request, c, chat=True)
    if req.tools and c.grammar is not None:
        raise InvalidRequest("'format' cannot be combined with 'tools'", param="format")
    opts = ChatOptions(
        messages=req.messages,
        tools=req.tools,
        tool_choice=ToolChoice("auto" if req.tools else "none"),
        grammar=c.grammar,
        thinking=c.think is not False,
        thinking_budget=effort_budget(c.think_level),
        finish_tool=False,  # not an Ollama concept: with tools the model may answer in text
        effort=_asked(c),
    )
    # A model's own system prompt starts a conversation that has none.
    job = Job(_model(c), (ChatInput(opts, model_system=True, untemplated="raw"),), c.knobs)
    return await _answer(request, job, c, t0, chat=True, context=False)


async def generate(request: Request) -> Response:
    t0 = time.perf_counter()
    req = await asyncio.to_thread(parse_generate, await read_json(request))
    c = req.common
    if not req.prompt:
        return await _load_or_unload(request, c, chat=False)
    job = Job(_model(c), (_generate_input(req),), c.knobs)
    return await _answer(request, job, c, t0, chat=False, context=not req.raw and req.suffix is None)


def _asked(c: Common) -> str | None:
    """The thinking `think` asked for by name (ChatOptions.effort)."""
    return c.think_level or ("on" if c.think is True else None)


def _generate_input(req: OllamaGenerate) -> Input:
    """The prompt: through the model's own template (reasoning and content split), or as
    plain text for raw prompts and custom templates. A `context` from a previous answer
    goes first, and the new part then gets no BOS of its own; a conversation continued so
    already has its system prompt, so the model's own is added only to a new one."""
    grammar = req.common.grammar
    if req.suffix is not None:  # the model writes what goes between prompt and suffix
        return FimInput(req.prompt, req.suffix, grammar)
    prefix: Sequence[int] = tuple(req.context or ())
    fresh = not req.context
    if req.raw:
        return TextInput(req.prompt, grammar, prefix=prefix)
    if req.template is not None:
        return TemplateInput(req.prompt, grammar, prefix=prefix, template=req.template, system=req.system,
                             model_system=fresh)  # fmt: skip
    messages = ([{"role": "system", "content": req.system}] if req.system else []) + [
        {"role": "user", "content": req.prompt}
    ]
    opts = ChatOptions(
        messages=messages,
        grammar=grammar,
        thinking=req.common.think is not False,
        effort=_asked(req.common),
    )
    return ChatInput(opts, model_system=fresh, prefix=prefix, untemplated="raw")


async def _answer(request: Request, job: Job, c: Common, t0: float, *, chat: bool, context: bool) -> Response:
    ready = await prepare(state_of(request).runtime, job)
    lm, knobs = ready.lm, ready.knobs
    if isinstance(knobs, OllamaKnobs) and knobs.num_ctx is not None and knobs.num_ctx > lm.engine.n_ctx:
        log.info("num_ctx %d asked for %s; its loaded context holds %d tokens", knobs.num_ctx, lm.name,
                 lm.engine.n_ctx)  # fmt: skip
    gen = run(ready)
    renderer = OllamaRenderer(
        c.model or lm.name,
        chat=chat,
        streaming=c.stream,
        thinking=c.think is not False,
        logprobs=c.logprobs,
        t0=t0,
        load_ns=ready.load_ns,
        context=ready.prompts[0].tokens if context else None,
    )
    return await respond(request, gen, renderer)


async def _load_or_unload(request: Request, c: Common, *, chat: bool) -> Response:
    """Ollama's empty request: load the model, or unload it when keep_alive is 0 (an
    admin's only: the model is shared; a user's keep_alive elsewhere is ignored)."""
    if c.keep_alive == 0:
        if not MANAGE_MODELS.get():
            raise Forbidden("unloading a model needs an admin key")
        unload = runtime_feature(request, "runtime", "unload")
        await unload(loaded_alias(state_of(request).runtime, c.model))
        reason = "unload"
    else:
        await use_model(request, c.model, c.keep_alive)
        reason = "load"
    return JSONResponse(adapter.load_reply(c.model, adapter.iso_time(time.time()), chat=chat, reason=reason))
