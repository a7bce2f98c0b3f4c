"""GET /openapi.json: an OpenAPI 3.1 description of every route, built from the app's own
route table: a route without an entry in OPERATIONS is still listed, as `x-undocumented`
(`undocumented()` names them; a test keeps that empty). Request schemas say what the parsers
accept (`Fields` reads null as absent: optional members are nullable); what JSON Schema cannot
state (a tool_choice naming one of the tools, a token id in the vocabulary, a grammar that
compiles) is left to the server's 400."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from .. import __version__
from ..chat.tools.spec import MAX_LOOSE_NAME
from ..redact import DETECTORS, STYLES
from ..types import MAX_BREAKERS
from .authn import ADMIN_PATHS, OPEN_PATHS, OPEN_PREFIXES
from .http import MAX_BODY, json_response
from .openai.responses_schema import EFFORTS, INCLUDES, MAX_INPUT_ITEMS, MAX_TOP_LOGPROBS, SUMMARIES
from .openai.responses_search import MAX_RESULTS
from .openai.schemas import LLAMA_SAMPLING, MAX_N, MAX_STOP, UNSUPPORTED_SAMPLING
from .redact import MAX_TEXT, MODEL_TYPES

__all__ = ["OPERATIONS", "openapi_document", "openapi_routes", "undocumented"]

SCHEMES = {"bearer": {"type": "http", "scheme": "bearer"}, "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"}}  # fmt: skip

J = dict[str, Any]
NULL: J = {"type": "null"}
_TYPES = {"str": "string", "bool": "boolean", "int": "integer", "num": "number", "obj": "object"}
_MEMBER = re.compile(r"(\w+)(!?):(\w+)(?:\[(-?[\d.]*),(-?[\d.]*)\])?")


def scalar(kind: str, lo: str = "", hi: str = "") -> J:
    """A JSON type by its short name (`str`, `bool`, `int`, `num`, `obj`); `lo`/`hi` bound a number."""
    bounds = {key: float(b) if "." in b else int(b) for key, b in (("minimum", lo), ("maximum", hi)) if b}
    return {"type": _TYPES[kind], **bounds}


def arr(items: J, **kw: Any) -> J:
    return {"type": "array", "items": items, **kw}


def anyof(*alts: J) -> J:
    return {"anyOf": list(alts)}


def enum(*values: str) -> J:
    return {"type": "string", "enum": list(values)}


def fields(spec: str = "", more: J | None = None, *, nullable: bool = True, **kw: Any) -> J:
    """An object read with `Fields`, from a spec like "model:str n!:int[1,16]" (`!`
    marks a required member) and `more` members; optional members may be null."""
    members = [(n + req, scalar(kind, lo, hi)) for n, req, kind, lo, hi in _MEMBER.findall(spec)]
    props = {name.rstrip("!"): schema for name, schema in [*members, *(more or {}).items()]}
    required = [name.rstrip("!") for name, _ in [*members, *(more or {}).items()] if name.endswith("!")]
    if nullable:  # null is absent: an optional member may be null (said once)
        props = {k: v if k in required or NULL in v.get("anyOf", ()) else anyof(v, NULL) for k, v in props.items()}  # fmt: skip
    return {"type": "object", "properties": props, **({"required": required} if required else {}), **kw}


def exact(spec: str, more: J | None = None) -> J:
    """An object whose members are checked one by one (null is not read as absent)."""
    return fields(spec, more, nullable=False)


# The schemas are a table: one line each where it fits, so the formatter leaves them alone.
# fmt: off
STR, BOOL, OBJ, TEXT = scalar("str"), scalar("bool"), scalar("obj"), {"type": "string", "minLength": 1}
PART = "[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
STORE_NAME = {"type": "string", "pattern": rf"^({PART}/)?{PART}(:{PART})?$", "description": "[namespace/]model[:tag]"}
NAME = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}
TOKENS = arr(scalar("int", "0"), minItems=1)
JSON, SSE, NDJSON = "application/json", "text/event-stream", "application/x-ndjson"

# -- OpenAI ---------------------------------------------------------------------------------
CHAT_MESSAGE = fields("role!:str name:str tool_call_id:str",
                      {"content": anyof(STR, arr(exact("text!:str", {"type!": enum("text")})))})
FUNCTION = fields("description:str parameters:obj strict:bool", {"name!": NAME})
TOOL = exact("", {"type!": enum("function"), "function!": FUNCTION})
REPETITION = fields("enabled:bool multiplier:num[0,10] base:num[1,4] allowed_length:int[1,64] window:int[8,8192]")
RESPONSE_FORMAT = anyof(
    fields("", {"type!": enum("text", "json_object")}),
    fields("", {"type!": enum("json_schema"),
                "json_schema!": fields("name:str strict:bool", {"schema!": anyof(OBJ, BOOL)})}))
LOGIT_BIAS = {"type": "object", "propertyNames": {"pattern": "^[0-9]+$"},
              "additionalProperties": scalar("num", "-100", "100")}
# How JSON output is laid out and shaped (api/jsonformat), on every API.
JSON_STYLE = {"json_layout": enum("compact", "indented", "free"), "schema_shape": enum("tight", "free")}
# llama-server's further samplers (OpenAI bodies and Ollama options).
LLAMA = {name: scalar("int" if whole else "num", str(lo), str(hi)) for name, (whole, lo, hi) in LLAMA_SAMPLING.items()}
LLAMA["dry_sequence_breakers"] = arr(TEXT, maxItems=MAX_BREAKERS)
LLAMA |= {name: {"const": off} for name, off in UNSUPPORTED_SAMPLING.items()}  # only "off"
SAMPLING = fields(
    "model:str stream:bool max_tokens:int[1,] max_completion_tokens:int[1,] temperature:num[0,2] top_p:num[0,1] "
    "top_k:int[0,] min_p:num[0,1] typical_p:num[0,1] repeat_penalty:num[0,10] repeat_last_n:int[0,] seed:int "
    "presence_penalty:num[-2,2] frequency_penalty:num[-2,2] grammar:str regex:str llamay_session:str",
    {"n": scalar("int", "1", str(MAX_N)), "stream_options": fields("include_usage:bool"), "logit_bias": LOGIT_BIAS,
     "stop": anyof(STR, arr(STR, maxItems=MAX_STOP)), "repetition": anyof(BOOL, REPETITION),
     "response_format": RESPONSE_FORMAT, **JSON_STYLE, **LLAMA})["properties"]
# At most one of response_format, grammar and regex; n is 1 with llamay_session; top_logprobs
# above 0 needs logprobs.
ONE_FORMAT = {"not": anyof(*({"required": list(pair)} for pair in
                             (("grammar", "regex"), ("grammar", "response_format"), ("regex", "response_format"))))}
SESSION_ALONE = anyof({"properties": {"llamay_session": NULL}}, {"properties": {"n": anyof({"const": 1}, NULL)}})
TOP_NEEDS_LOGPROBS = anyof({"properties": {"top_logprobs": anyof({"const": 0}, NULL)}},
                           {"properties": {"logprobs": {"const": True}}, "required": ["logprobs"]})
CHOICE_FN = exact("", {"type!": enum("function"), "function!": exact("name!:str")})
CHAT = fields(
    "logprobs:bool top_logprobs:int[0,20] reasoning_effort:str reasoning_budget_tokens:int[0,] think:bool "
    "parallel_tool_calls:bool chat_template_kwargs:obj",
    {**SAMPLING, "chat_template": {**STR, "maxLength": 65536}, "messages!": arr(CHAT_MESSAGE, minItems=1), "tools": arr(TOOL, maxItems=128),
     "tool_choice": anyof(enum("auto", "none", "required"), CHOICE_FN), "finish_tool": anyof(BOOL, STR)},
    allOf=[ONE_FORMAT, SESSION_ALONE, TOP_NEEDS_LOGPROBS])
PROMPT = anyof(TEXT, arr(TEXT, minItems=1), TOKENS, arr(TOKENS, minItems=1))
# max_tokens 0 reads the prompt only. echo with logprobs scores the prompt: not streamed, not
# on a session.
SCORED = {"properties": {"echo": {"const": True}, "logprobs": scalar("int")}, "required": ["echo", "logprobs"]}
SCORED_ALONE = [{"not": {"allOf": [SCORED, {"required": [key], "properties": {key: no}}]}}
                for key, no in (("stream", {"const": True}), ("llamay_session", STR))]
COMPLETION = fields("echo:bool logprobs:int[0,5] max_tokens:int[0,] max_completion_tokens:int[0,]",
                    {**{k: v for k, v in SAMPLING.items() if not k.startswith("max_")},
                     "prompt!": PROMPT, "suffix": {"const": ""}},
                    allOf=[ONE_FORMAT, SESSION_ALONE, *SCORED_ALONE])
CONTEXT = fields("model:str marking:str", oneOf=[{"required": ["messages"]}, {"required": ["prompt"]}])
CONTEXT["properties"] |= {"prompt": TEXT, "messages": arr(CHAT_MESSAGE, minItems=1)}  # neither may be null
# The Responses API: function tools and file_search; a field the server cannot honour is refused.
R_PART = exact("text!:str", {"type!": enum("input_text", "output_text")})
R_ITEMS = [fields("id:str status:str", {"type": enum("message"), "role!": enum("user", "assistant", "system", "developer"),
                                         "content!": anyof(STR, arr(R_PART))}),
           fields("id:str status:str call_id!:str name!:str arguments!:str", {"type!": enum("function_call")}),
           fields("id:str status:str call_id!:str output!:str", {"type!": enum("function_call_output")}),
           fields("id:str", {"type!": enum("reasoning"), "summary": arr(OBJ), "content": arr(OBJ)}),
           fields("id:str status:str", {"type!": enum("file_search_call"), "queries": arr(STR),
                                         "results": arr(fields("file_id:str filename:str score:num text:str attributes:obj"))}),
           exact("id!:str", {"type!": enum("item_reference")})]
R_TOOL = anyof(exact("", {"type!": enum("function"), "name!": NAME, "description": anyof(STR, NULL),
                          "parameters": anyof(OBJ, NULL), "strict": anyof(BOOL, NULL)}),
               fields(f"max_num_results:int[1,{MAX_RESULTS}]",
                      {"type!": enum("file_search"), "vector_store_ids!": arr(TEXT, minItems=1),
                       "ranking_options": fields("score_threshold:num[0,1]", {"ranker": enum("auto")}, additionalProperties=False),
                       "filters": NULL}, additionalProperties=False,
                      description="searches the server's -index; its vector store id is the index file's name "
                                  "without the extension"))
R_FORMAT = anyof(fields("", {"type!": enum("text", "json_object")}),
                 fields("name!:str description:str strict:bool", {"type!": enum("json_schema"), "schema!": anyof(OBJ, BOOL)}))
RESPONSES = fields(
    "model:str instructions:str stream:bool parallel_tool_calls:bool max_output_tokens:int[1,] temperature:num[0,2] "
    "top_p:num[0,1] store:bool previous_response_id:str user:str safety_identifier:str prompt_cache_key:str "
    "prompt_cache_retention:str service_tier:str seed:int",
    {"input": anyof(STR, arr(anyof(*R_ITEMS), maxItems=MAX_INPUT_ITEMS)), "tools": arr(R_TOOL, maxItems=128),
     "tool_choice": anyof(enum("auto", "none", "required"), exact("name!:str", {"type!": enum("function")}),
                          exact("", {"type!": enum("file_search")})),
     "text": fields("", {"format": R_FORMAT, "verbosity": enum("low", "medium", "high")}),
     "reasoning": fields("", {"effort": enum(*EFFORTS), "summary": enum(*SUMMARIES), "generate_summary": enum(*SUMMARIES)}),
     "metadata": {"type": "object", "maxProperties": 16, "propertyNames": {"maxLength": 64},
                  "additionalProperties": {"type": "string", "maxLength": 512}},
     "stream_options": OBJ, "background": {"const": False}, "include": arr(enum(*sorted(INCLUDES))),
     "truncation": enum("disabled", "auto"), "top_logprobs": scalar("int", "0", str(MAX_TOP_LOGPROBS)), **JSON_STYLE},
    additionalProperties=False)

# -- Anthropic ------------------------------------------------------------------------------
CACHE = fields("", {"type!": enum("ephemeral"), "ttl": enum("5m", "1h")})
A_TEXT = exact("text!:str", {"type!": enum("text")})
A_RESULT = exact("", {"type!": enum("tool_result"), "tool_use_id!": TEXT, "content": anyof(STR, arr(A_TEXT), NULL)})
A_USE = exact("input!:obj", {"type!": enum("tool_use"), "id!": TEXT, "name!": TEXT})
A_THINK = exact("thinking!:str", {"type!": enum("thinking")})
A_REDACTED = exact("", {"type!": enum("redacted_thinking")})


A_BLOCKS = {"user": (A_TEXT, A_RESULT), "system": (A_TEXT,), "assistant": (A_TEXT, A_USE, A_THINK, A_REDACTED)}
A_MESSAGES = arr(anyof(*(fields("", {"role!": enum(role), "content!": anyof(STR, arr(anyof(*blocks)))})
                         for role, blocks in A_BLOCKS.items())), minItems=1)
A_TOOL = fields("description:str input_schema!:obj", {"type": enum("custom"), "name!": NAME, "cache_control": CACHE})
A_FORMAT = fields("schema!:obj strict:bool", {"type!": enum("json_schema")})
A_THINKING = anyof(fields("display:str", {"type!": enum("disabled", "adaptive")}),
                   fields("budget_tokens!:int[1,] display:str", {"type!": enum("enabled")}))
A_SPEC = "model:str max_tokens:int[1,] temperature:num[0,2] top_p:num[0,1] top_k:int[0,] seed:int"
A_MORE = {"messages!": A_MESSAGES, "system": anyof(STR, arr(A_TEXT)), "stop_sequences": arr(STR, maxItems=32),
          "metadata": fields("user_id:str"), "tools": arr(A_TOOL), "thinking": A_THINKING,
          "tool_choice": anyof(fields("disable_parallel_tool_use:bool", {"type!": enum("auto", "any", "none")}),
                               fields("disable_parallel_tool_use:bool", {"type!": enum("tool"), "name!": TEXT})),
          "output_config": fields("", {"format": A_FORMAT}), "output_format": A_FORMAT, "cache_control": CACHE,
          **JSON_STYLE}
MESSAGES = fields(A_SPEC.replace("max_tokens:", "max_tokens!:") + " stream:bool", A_MORE)
COUNT = fields(A_SPEC, A_MORE)

# -- Ollama ---------------------------------------------------------------------------------
NUMBER = r"[0-9]*\.?[0-9]+"
DURATION = anyof(scalar("num"), {"type": "string", "pattern": rf"^[+-]?({NUMBER}|({NUMBER}(ns|us|µs|μs|ms|s|m|h))+)$",
                                  "description": "a Go duration or seconds; negative: keep loaded"})
OPTIONS = fields(
    "seed:int num_predict:int repeat_last_n:int[-1,] typical_p:num[0,1] repeat_penalty:num[0,10] top_k:int "
    "temperature:num[0,100] top_p:num[0,1] min_p:num[0,1] presence_penalty:num[-2,2] frequency_penalty:num[-2,2] "
    "num_ctx:int[1,]", {"stop": anyof(STR, arr(STR, maxItems=16)), "penalize_newline": {"const": True}, **LLAMA},
    description="Ollama's options; others are accepted and ignored")
O_COMMON = {"keep_alive": DURATION, "options": OPTIONS, "format": anyof(enum("json", ""), OBJ),
            "think": anyof(BOOL, enum("low", "medium", "high", "max")), "strict": BOOL, **JSON_STYLE}
O_SPEC = "model:str stream:bool logprobs:bool top_logprobs:int[0,20] "
# Ollama's tool names: any text without control characters (chat/tools/spec.py).
O_NAME = {"type": "string", "minLength": 1, "maxLength": MAX_LOOSE_NAME, "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]*$"}
O_FUNCTION = fields("description:str parameters:obj strict:bool", {"name!": O_NAME})
O_CALL = fields("", {"function!": fields("name!:str", {"arguments": anyof(OBJ, STR)})})
O_MESSAGE = fields("role!:str content:str thinking:str tool_name:str",
                   {"images": arr(STR, maxItems=0), "tool_calls": arr(O_CALL)})
O_CHAT = fields(O_SPEC, {**O_COMMON, "messages": arr(O_MESSAGE),
                         "tools": arr(exact("", {"type": enum("function"), "function!": O_FUNCTION}))})
O_GENERATE = fields(O_SPEC + "prompt:str system:str template:str raw:bool", {**O_COMMON, "suffix": {"const": ""},
                    "context": arr(scalar("int", "0")), "images": arr(STR, maxItems=0)})
O_EMBED = fields("model:str dimensions:int[1,] truncate:bool",
                 {"input!": anyof(STR, arr(STR, minItems=1)), "keep_alive": DURATION})


def named(spec: str = "", source: J = STORE_NAME) -> J:
    """A store route's body: the model in `model` (`source`: what it may name), else in `name`."""
    out = fields(spec, anyOf=[{"required": ["model"]}, {"required": ["name"]}])
    out["properties"] |= {"model": source, "name": STORE_NAME}  # neither may be null
    return out


EMBED = fields("model:str dimensions:int[1,] truncate:bool",
               {"input!": anyof(STR, TOKENS, arr(anyof(STR, TOKENS), minItems=1, maxItems=2048)),
                "encoding_format": enum("float", "base64")})
RERANK = fields("query!:str top_n:int[1,] return_documents:bool truncate:bool model:str",
                {"documents!": arr(anyof(STR, fields("text!:str")), maxItems=2048)})
REDACT = fields("model:str", {"text!": {**STR, "maxLength": MAX_TEXT}, "types": arr(enum(*DETECTORS, *MODEL_TYPES)),
                              "style": enum(*STYLES)})
OPENAI_ERROR = exact("message!:str type!:str", {"param": anyof(STR, NULL), "code": anyof(STR, NULL)})
ERROR_OPENAI = exact("", {"error!": OPENAI_ERROR})
ERROR_ANTHROPIC = exact("request_id:str", {"type!": {"const": "error"}, "error!": exact("type!:str message!:str")})
ERROR_OLLAMA = exact("error!:str")
LIST = exact("", {"object!": {"const": "list"}, "data!": arr(OBJ)})
HEALTH = exact("version:str", {"status!": {"const": "ok"}, "models": arr(OBJ)})  # anonymous: status alone


def op(summary: str, body: J | None = None, *, ok: J | None = None, stream: str | None = None, binary: bool = False,
       params: Iterable[J] = (), codes: Iterable[int] = (), media: str = JSON) -> J:
    """One operation; `stream`: the media type of a streamed answer; `codes`: its own errors."""
    out: J = {"summary": summary, "parameters": list(params)}
    errs = set(codes)
    if body is not None:
        kind, schema = ("application/octet-stream", {**STR, "format": "binary"}) if binary else (JSON, body)
        out["requestBody"] = {"required": True, "content": {kind: {"schema": schema}}}
        errs |= {400, 408, 413}
    content: J = {media: {"schema": ok or OBJ}} | ({stream: {"schema": STR}} if stream else {})
    out["responses"] = {"200": {"description": "success", "content": content}} | {str(c): {} for c in errs}
    return out


def param(name: str, where: str = "path", schema: J = STR) -> J:
    return {"name": name, "in": where, "required": where == "path", "schema": schema}


GEN, MINE, STORE = (404, 503), (403, 404), (404, 501, 502)  # MINE: another principal's context, or none
CID, FORK_N = [param("cid")], param("n", "query", scalar("int", "1", "10000"))
RID = [param("rid")]
PAGING = [param("limit", "query", scalar("int", "1", "100")), param("order", "query", enum("asc", "desc")),
          param("after", "query")]
OPERATIONS: dict[tuple[str, str], J] = {
    ("GET", "/health"): op("liveness and engine status", ok=HEALTH),
    ("GET", "/openapi.json"): op("this document"),
    ("POST", "/v1/chat/completions"): op("chat (OpenAI)", CHAT, stream=SSE, codes=GEN),
    ("POST", "/v1/completions"): op("text completion (OpenAI)", COMPLETION, stream=SSE, codes=GEN),
    # With an anthropic-version header both answer in Anthropic's shape (anthropic/models.py).
    ("GET", "/v1/models"): op("models this server holds (Anthropic's shape with anthropic-version)", ok=LIST),
    ("GET", "/v1/models/{model}"): op("one loaded model (Anthropic's shape with anthropic-version)",
                                      params=[param("model")], codes=[404]),
    ("POST", "/v1/responses"): op("a response (OpenAI Responses API); a stored one continues with "
                                  "previous_response_id", RESPONSES, stream=SSE, codes=GEN),
    ("GET", "/v1/responses/{rid}"): op("a stored response", params=RID, codes=[404]),
    ("DELETE", "/v1/responses/{rid}"): op("delete a stored response and its context", params=RID, codes=[404]),
    ("GET", "/v1/responses/{rid}/input_items"): op("the conversation a stored response answered, paged",
                                                   params=[*RID, *PAGING], codes=[404]),
    ("POST", "/v1/contexts"): op("compute a prefix once and keep it (one of messages, prompt)", CONTEXT, codes=GEN),
    ("GET", "/v1/contexts"): op("list your contexts", ok=LIST),
    ("POST", "/v1/contexts/restore"): op("restore a snapshot file as a new context", OBJ, binary=True,
                                         params=[param("model", "query")], codes=(*MINE, 409)),
    ("GET", "/v1/contexts/{cid}"): op("one context", params=CID, codes=MINE),
    ("DELETE", "/v1/contexts/{cid}"): op("delete a context", params=CID, codes=MINE),
    ("POST", "/v1/contexts/{cid}/fork"): op("fork a context n ways (no KV copy)", params=[*CID, FORK_N],
                                            codes=(400, *MINE)),
    ("GET", "/v1/contexts/{cid}/snapshot"): op("download a context as a file", params=CID, codes=MINE),
    ("POST", "/v1/messages"): op("messages (Anthropic)", MESSAGES, stream=SSE, codes=(404, 529)),
    ("POST", "/v1/messages/count_tokens"): op("count a request's input tokens (Anthropic)", COUNT, codes=[404]),
    ("POST", "/api/chat"): op("chat (Ollama); no messages: a load (keep_alive 0: unload)", O_CHAT,
                              stream=NDJSON, codes=GEN),
    ("POST", "/api/generate"): op("generate (Ollama); no prompt: a load (keep_alive 0: unload)", O_GENERATE,
                                  stream=NDJSON, codes=GEN),
    ("GET", "/api/tags"): op("models stored or served (Ollama)"),
    ("GET", "/api/ps"): op("models loaded now (Ollama)"),
    ("POST", "/api/show"): op("a model's details (Ollama)", fields("model:str name:str verbose:bool"), codes=[404]),
    ("GET", "/api/version"): op("version (Ollama)"),
    ("POST", "/api/copy"): op("copy a stored model", fields("", {"source!": STR, "destination!": STORE_NAME}),
                              codes=STORE),
    ("DELETE", "/api/delete"): op("remove a stored model", named(), codes=STORE),
    ("POST", "/api/pull"): op("pull a model (a catalog name, hf:..., a URL) into the store, as `name` if given",
                              named("stream:bool", STR), stream=NDJSON, codes=STORE),
    ("POST", "/api/create"): op("create a model from another", named("from!:str template:str system:str "
                                "parameters:obj stream:bool"), stream=NDJSON, codes=STORE),
    ("POST", "/api/push"): op("publish a model (not available here: always 501)", OBJ, codes=[501]),
    ("POST", "/api/embed"): op("embeddings (Ollama)", O_EMBED, codes=(404, 501)),
    ("POST", "/api/embeddings"): op("one embedding, the older Ollama route",
                                    fields("model:str prompt:str", {"keep_alive": DURATION}), codes=(404, 501)),
    ("POST", "/api/load"): op(
        "load a model (NDJSON progress unless stream is false)",
        fields("model:str stream:bool", {"keep_alive": DURATION}),
        stream=NDJSON,
        codes=(*GEN, 409),
    ),
    ("POST", "/api/unload"): op("unload a model now", fields("model!:str"), codes=[501]),
    ("POST", "/api/reset"): op("unload every model now", codes=[501]),
    ("POST", "/v1/embeddings"): op("embeddings (OpenAI)", EMBED, codes=[404]),
    ("POST", "/tokenize"): op("text to token ids (llama-server's shape; vLLM's names too)",
                              fields("content:str prompt:str add_special:bool add_special_tokens:bool "
                                     "parse_special:bool with_pieces:bool model:str"), codes=[404]),
    ("POST", "/detokenize"): op("token ids to text", fields("model:str", {"tokens!": arr(scalar("int"))}),
                                codes=[404]),
    ("GET", "/tokenizer_info"): op("special tokens, chat template and limits of a model",
                                   params=[param("model", "query")], codes=[404]),
    ("POST", "/apply-template"): op("the prompt a chat completions body renders to", CHAT, codes=GEN),
    ("POST", "/rerank"): op("rerank documents against a query", RERANK, codes=[404]),
    ("POST", "/v1/rerank"): op("rerank documents against a query", RERANK, codes=[404]),
    ("POST", "/v1/retrieve"): op("passages of the indexed documents, best first",
                                 fields("query!:str min_score:num top_k:int[1,100]"), codes=[404]),
    ("POST", "/v1/redact"): op("find and redact personal data", REDACT, codes=[404]),
    ("GET", "/v1/stats"): op("traffic, tokens, queue, KV and cache figures (admin)"),
    ("GET", "/metrics"): op("the same in Prometheus format (admin)", ok=STR, media="text/plain"),
    ("GET", "/v1/whoami"): op("the caller: principal, role, groups, and whether keys are required"),
    ("GET", "/"): op("the web console", ok=STR, media="text/html"),
    ("GET", "/web/{name}"): op("a file of the web console", params=[param("name")], ok=STR,
                               media="text/javascript", codes=[404]),
    ("GET", "/docs"): op("the integration guide as HTML", ok=STR, media="text/html"),
    ("GET", "/api/docs"): op("the integration guide as Markdown", ok=STR, media="text/markdown"),
}
# fmt: on


def _methods(routes: Iterable[BaseRoute]) -> list[tuple[str, str]]:
    pairs = [(m, r.path_format) for r in routes if isinstance(r, Route) for m in sorted(r.methods or ())]
    return [(m, path) for m, path in pairs if m != "HEAD"]


def undocumented(routes: Iterable[BaseRoute]) -> list[tuple[str, str]]:
    """(method, path) of every route that has no entry in OPERATIONS."""
    return [key for key in _methods(routes) if key not in OPERATIONS]


def _error(path: str) -> J:
    shape = ERROR_OLLAMA if path.startswith("/api/") else ERROR_OPENAI
    shape = ERROR_ANTHROPIC if path.startswith("/v1/messages") else shape
    return {"description": "error", "content": {JSON: {"schema": shape}}}


def _operation(method: str, path: str, entry: J | None) -> J:
    out = dict(entry or {"summary": "undocumented", "x-undocumented": True, "responses": {"200": {}}})
    out["operationId"] = method.lower() + re.sub(r"\W+", "_", path).rstrip("_")
    codes = set(out["responses"]) - {"200"}
    is_open = path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)
    codes |= set() if is_open else {"401", "403"} if path in ADMIN_PATHS else {"401"}
    ok = out["responses"]["200"] or {"description": "success"}
    out["responses"] = {"200": ok} | {c: _error(path) for c in sorted(codes)} | {"default": _error(path)}
    out["security"] = [] if is_open else [{"bearer": []}, {"apiKey": []}, {}]
    return out


def openapi_document(routes: Iterable[BaseRoute]) -> J:
    paths: J = {}
    for method, path in _methods(routes):
        paths.setdefault(path, {})[method.lower()] = _operation(method, path, OPERATIONS.get((method, path)))
    about = f"OpenAI, Anthropic and Ollama APIs of a local LLM server. A body over {MAX_BODY} bytes is a 413. Keys are needed only when the server has keys (admin routes: an admin key)."  # fmt: skip
    info = {"title": "llamay", "version": __version__, "description": about}
    return {"openapi": "3.1.0", "info": info, "paths": paths, "components": {"securitySchemes": SCHEMES}}


async def openapi(request: Request) -> Response:
    return json_response(openapi_document(request.app.routes))


def openapi_routes() -> list[Route]:
    return [Route("/openapi.json", openapi, methods=["GET"])]
