"""The chat pipeline every API shares: messages + tools + reasoning options in; prompt
tokens and a constraint plan out; generated text split into reasoning, content and tool
calls on the way back. Knows protocols' common ground, not their JSON shapes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..engine.request import ConstraintPlan
from ..errors import InvalidRequest
from ..grammar import Grammar
from .template import ChatTemplate
from .tools import (
    FINISH_TOOL,
    ContentDelta,
    ToolArgsDelta,
    ToolCall,
    ToolCallStart,
    ToolChoice,
    ToolSpec,
    ToolStreamParser,
    supports_parallel_calls,
    think_first,
)
from .traits import Traits

if TYPE_CHECKING:
    from ..runtime import LoadedModel

__all__ = [
    "ChatOptions",
    "ChatSetup",
    "ChatOutput",
    "Piece",
    "prepare_chat",
    "model_traits",
    "output_limit",
    "wanted_limit",
    "check_room",
    "FINISH_TOOL_MODES",
    "with_finish_default",
    "effort_budget",
    "thinking_plan",
    "asked_variables",
]

# The server's `-finish-tool`: "off" adds the finish tool only when a request asks for it;
# "auto" also adds it to "required" requests that do not say.
FINISH_TOOL_MODES = ("off", "auto")


@dataclass(frozen=True)
class ChatOptions:
    """What a chat request asks for, whatever API it came through. `finish_tool`: False,
    True, or the name of one of `tools` that ends the turn; None (unsaid) takes the
    server's default, which `prepare` puts in (`with_finish_default`).
    `parallel_tool_calls`: None (the request did not say) means what the model's template
    supports."""

    messages: list[dict[str, Any]]
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=lambda: ToolChoice("none"))
    parallel_tool_calls: bool | None = None
    grammar: Grammar | None = None
    thinking: bool = True
    thinking_budget: int | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    finish_tool: bool | str | None = None  # None: unsaid; off
    # The thinking the request asked for by name: an effort level ("low", "high", ...), or
    # "on" when it asked without one; None when it did not ask (see `asked_variables`).
    effort: str | None = None


def with_finish_default(opts: ChatOptions, mode: str) -> ChatOptions:
    """`opts` with an unsaid `finish_tool` set from the server's mode (FINISH_TOOL_MODES).
    "required" means a call of the caller's tools, as OpenAI defines it, so the finish tool
    (an exit without any call) comes only when the request or the server operator asks."""
    if opts.finish_tool is not None:
        return opts
    return replace(opts, finish_tool=mode == "auto" and opts.tool_choice.mode == "required")


def chat_template(lm: LoadedModel, tools: bool) -> tuple[ChatTemplate, Traits]:
    """The template (and its traits) for a request with or without tools: the GGUF's
    tool-use template when there are tools and it has one, as llama.cpp chooses."""
    if tools and lm.tool_template is not None and lm.tool_traits is not None:
        return lm.tool_template, lm.tool_traits
    return lm.template, lm.traits


def model_traits(lm: LoadedModel) -> Traits:
    """Per-model facts derived from its template and vocabulary (computed at load)."""
    return lm.traits


@dataclass
class ChatSetup:
    tokens: list[int]
    text: str
    plan: ConstraintPlan | None
    traits: Traits
    tools: list[ToolSpec]
    finish_tool: str | None
    reasoning_started: bool

    def output(self) -> ChatOutput:
        return ChatOutput(self)


def prepare_chat(lm: LoadedModel, opts: ChatOptions) -> ChatSetup:
    tools, finish = _with_finish_tool(opts)
    if opts.tool_choice.mode == "none":
        # No calls may be made, so none are parsed either: a reply that looks like one (a
        # JSON answer, say) is content.
        tools = []
    template, traits = chat_template(lm, bool(tools))
    fmt = traits.tool_format
    messages, extra = fmt.prepare(opts.messages, tools)
    kwargs = {**opts.template_kwargs, **extra}
    # Said either way, as llama.cpp does: some templates open the think block only when
    # told to (QwQ's and DeepSeek's in llama.cpp's tree test `enable_thinking`).
    kwargs.setdefault("enable_thinking", opts.thinking)
    kwargs = {**asked_variables(template.variables, opts), **kwargs}
    text = template.render(messages, add_generation_prompt=True, **kwargs)
    text = template.strip_bos_eos(text, add_bos=lm.model.add_bos)
    tokens = lm.model.tokenize(text, add_special=True, parse_special=True)
    markers = traits.reasoning
    started = markers is not None and markers.opened_by(text)
    plan = _plan(lm, opts, traits, tools, started)
    return ChatSetup(tokens, text, plan, traits, tools, finish, started)


# reasoning_effort levels as templates spell them (gpt-oss's: low, medium, high).
_TEMPLATE_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "max": "high"}


def asked_variables(variables: frozenset[str], opts: ChatOptions) -> dict[str, Any]:
    """Template variables that switch thinking on, for a request that asked for it: Granite
    3.3's `thinking` (its template then asks for `<think>` and `<response>`; it does not
    think unless told) and gpt-oss's `reasoning_effort` (its template writes "Reasoning:
    medium" unless told a level). A request that did not ask gets the template's default."""
    if not opts.thinking or opts.effort is None:
        return {}
    out: dict[str, Any] = {}
    if "thinking" in variables:
        out["thinking"] = True
    level = _TEMPLATE_EFFORTS.get(opts.effort)
    if "reasoning_effort" in variables and level is not None:
        out["reasoning_effort"] = level
    return out


def _with_finish_tool(opts: ChatOptions) -> tuple[list[ToolSpec], str | None]:
    tools = list(opts.tools)
    names = {t.name for t in tools}
    choice = opts.finish_tool
    if isinstance(choice, str):
        if choice not in names:
            raise InvalidRequest(
                f"'finish_tool' names '{choice}', which is not one of the tools", param="finish_tool"
            )
        return tools, choice
    if not choice or opts.tool_choice.mode in ("none", "function"):
        return tools, None
    if FINISH_TOOL.name in names:
        raise InvalidRequest(
            "a tool is already called 'finish': set 'finish_tool' to its name, or to false",
            param="finish_tool",
        )
    return tools + [FINISH_TOOL], FINISH_TOOL.name


def _plan(
    lm: LoadedModel, opts: ChatOptions, traits: Traits, tools: list[ToolSpec], started: bool
) -> ConstraintPlan | None:
    plan = _constraint(lm, opts, traits, tools, started)
    think = thinking_plan(lm, opts, traits, started, plan)
    if think is None:
        return plan
    if plan is None:  # nothing to constrain: the budget ends thinking
        return ConstraintPlan(None, frozenset({think.close[-1]}), None, label="think", **_think_fields(think))
    return replace(plan, **_think_fields(think))


def _think_fields(think: ConstraintPlan) -> dict[str, Any]:
    return {
        "budget": think.budget,
        "close": think.close,
        "thinking": think.thinking,
        "think_open": think.think_open,
        "reserve": think.reserve,
        "reserve_share": think.reserve_share,
    }


# Thinking budgets of the named effort levels (OpenAI's reasoning_effort, Ollama's think
# levels); "high" and above leave the model to its own judgement.
EFFORT_BUDGETS: dict[str, int | None] = {
    "minimal": 256,
    "low": 1024,
    "medium": 4096,
    "high": None,
    "max": None,
}


def effort_budget(level: str | None) -> int | None:
    """The thinking budget of an effort level (None: unbounded, or no level)."""
    return EFFORT_BUDGETS.get(level) if level else None


# Of max_tokens, what a constrained answer keeps when the grammar does not bound its length.
ANSWER_SHARE = 0.5


def thinking_plan(
    lm: LoadedModel, opts: ChatOptions, traits: Traits, started: bool, plan: ConstraintPlan | None
) -> ConstraintPlan | None:
    """The thinking budget's part of a plan (None: no budget applies).

    The close is the family's own marker as tokens (gpt-oss's `<|end|>`, the resume
    `<|start|>assistant`, and for a free answer the final channel's header). The budget is
    the request's (or the server's default, put in by the route). Under a constraint (tools,
    a schema) the answer keeps its room whatever the budget: ANSWER_SHARE of max_tokens, or
    the grammar's length bound when that is less; so a thinking model that never closes its
    block still answers with a call or an object. Thinking off is a budget of 0:
    a block the template opens anyway (or the model does) is closed at once."""
    markers = traits.reasoning
    if markers is None:
        return None
    model = lm.model
    close_text = markers.close_tag + getattr(markers, "resume", "")
    if getattr(markers, "style", "tags") == "harmony" and (plan is None or plan.label == "think"):
        close_text += "<|channel|>final<|message|>"
    close = tuple(model.tokenize(close_text, add_special=False, parse_special=True))
    think_open = tuple(model.tokenize(markers.open_tag, add_special=False, parse_special=True))
    constrained = plan is not None and plan.grammar is not None
    budget = opts.thinking_budget if opts.thinking_budget is not None else lm.thinking_budget
    if not opts.thinking:
        budget = 0  # off: a block the template or the model opens anyway is closed at once
    if not close or (budget is None and not constrained):
        return None
    reserve, share = 0, 0.0
    if constrained:
        assert plan is not None
        bound = getattr(plan.grammar, "max_bytes", None)
        reserve, share = (bound + 1 if bound is not None else 0), ANSWER_SHARE
    return ConstraintPlan(
        None, budget=budget, label="think", close=close, thinking=started,
        think_open=think_open, reserve=reserve, reserve_share=share,
    )  # fmt: skip


def _constraint(
    lm: LoadedModel, opts: ChatOptions, traits: Traits, tools: list[ToolSpec], started: bool
) -> ConstraintPlan | None:
    markers = traits.reasoning
    close_token = markers.close_token if markers is not None and started else None
    if opts.tool_choice.mode != "none" and tools:
        if opts.grammar is not None:
            raise InvalidRequest("'response_format' cannot be combined with tools", param="response_format")
        # Naming one function asks for that call, once. Unsaid, several calls in one turn
        # only when the template can show the model such a turn (else it invents calls).
        parallel = opts.parallel_tool_calls
        if parallel is None:
            parallel = supports_parallel_calls(chat_template(lm, True)[0].source)
        parallel = parallel and opts.tool_choice.mode != "function"
        tp = traits.tool_format.plan(tools, opts.tool_choice, parallel, lm.model.special_id)
        if markers is not None and (opts.thinking or started):
            opened = lm.model.tokenize(markers.open_tag, add_special=False, parse_special=True)
            tp = think_first(tp, markers, started=started, special=lm.model.special_id, open_tokens=opened)
        if tp.immediate:
            return ConstraintPlan(tp.grammar, label="tools")
        return ConstraintPlan(tp.grammar, tp.trigger_tokens, tp.trigger_text, label="tools")
    if opts.grammar is None:
        return None
    if started and close_token is not None:
        # Think freely, then the answer follows the format from the end of thinking on.
        return ConstraintPlan(opts.grammar, frozenset({close_token}), None, label="json")
    return ConstraintPlan(opts.grammar, label="json")


@dataclass(frozen=True)
class Piece:
    """One step of output: `kind` is "reasoning", "content", "call" (index, id, name) or
    "args" (index, text)."""

    kind: str
    text: str = ""
    index: int = 0
    id: str = ""
    name: str = ""


class ChatOutput:
    """Splits one choice's generated text into pieces, as it streams."""

    def __init__(self, setup: ChatSetup) -> None:
        markers = setup.traits.reasoning
        self._reasoning = markers.parser(started=setup.reasoning_started) if markers is not None else None
        self._tools: ToolStreamParser | None = None
        if setup.tools:
            self._tools = setup.traits.tool_format.parser(setup.tools, finish_tool=setup.finish_tool)
        self.reasoning = ""
        self.content = ""

    def push(self, text: str) -> list[Piece]:
        if self._reasoning is None:
            return self._content(text)
        thought, said = self._reasoning.push(text)
        return self._thought(thought) + self._content(said)

    def finish(self) -> list[Piece]:
        out: list[Piece] = []
        if self._reasoning is not None:
            thought, said = self._reasoning.finish()
            out += self._thought(thought) + self._content(said)
        if self._tools is not None:
            out += self._convert(self._tools.finish())
        return out

    @property
    def calls(self) -> list[ToolCall]:
        return list(self._tools.calls) if self._tools is not None else []

    def _thought(self, text: str) -> list[Piece]:
        if not text:
            return []
        self.reasoning += text
        return [Piece("reasoning", text)]

    def _content(self, text: str) -> list[Piece]:
        if not text:
            return []
        if self._tools is None:
            self.content += text
            return [Piece("content", text)]
        return self._convert(self._tools.push(text))

    def _convert(self, deltas: list[Any]) -> list[Piece]:
        out = []
        for d in deltas:
            if isinstance(d, ContentDelta):
                if d.text:
                    self.content += d.text
                    out.append(Piece("content", d.text))
            elif isinstance(d, ToolCallStart):
                out.append(Piece("call", index=d.index, id=d.id, name=d.name))
            elif isinstance(d, ToolArgsDelta):
                out.append(Piece("args", d.fragment, index=d.index))
        return out


def wanted_limit(plan: ConstraintPlan | None, requested: int | None, default: int) -> int:
    """`max_tokens` a request asks for, whatever API it came through, before the context's
    room: what it asked for, if it asked; else for constrained output whose schema makes
    every answer finite, that bound (a token is at least one byte, so the grammar's byte
    bound plus the end-of-text token: every answer fits); else the server's default output
    budget (`-max-tokens`), for free text as for constrained output."""
    if requested is not None:
        return requested
    if plan is not None and not plan.lazy:
        bound = getattr(plan.grammar, "max_bytes", None)
        if bound is not None:
            return bound + 1
    return default


def output_limit(plan: ConstraintPlan | None, requested: int | None, default: int, room: int) -> int:
    """`wanted_limit`, never more than `room`, the context left after the prompt (at least 1)."""
    return min(wanted_limit(plan, requested, default), max(1, room))


# The longest shortest-answer search run before a request (tokens).
MIN_SEARCH = 8192


def check_room(
    lm: LoadedModel, plan: ConstraintPlan | None, n_prompt: int, requested: int | None, default: int
) -> None:
    """A 400 naming the minimum when the output limit of a prompt of `n_prompt` tokens
    (`output_limit`) cannot hold the shortest answer its plan's grammar allows (active
    from the first token; a lazy or thinking plan is not judged), before anything runs.
    Compiles the grammar on a miss: call off the event loop."""
    if plan is None or plan.grammar is None or plan.lazy or plan.starts_thinking:
        return
    n_ctx = lm.engine.n_ctx
    limit = output_limit(plan, requested, default, n_ctx - n_prompt)
    shortest = lm.model.compile_cache.min_tokens(plan.grammar, MIN_SEARCH)
    if shortest is None or shortest <= limit:
        return
    if limit < wanted_limit(plan, requested, default):
        raise InvalidRequest(
            f"the context ({n_ctx} tokens) leaves room for {limit} after the prompt, too few for "
            f"any valid answer: the shortest takes {shortest} tokens",
            param="messages",
        )
    raise InvalidRequest(
        f"max_tokens {limit} is too small for any valid answer: the shortest takes {shortest} tokens "
        f"(set max_tokens to at least {shortest})",
        param="max_tokens",
    )
