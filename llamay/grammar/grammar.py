"""`Grammar`: a validated, model-independent output constraint.

A Grammar is built from a JSON schema, llama.cpp GBNF, a regex or llguidance Lark; every
constructor validates it fully and raises GrammarError if it cannot be enforced. It can
be checked against bytes without any model (`accepts_prefix`, `matches`), and the engine
turns it into a per-request `Constraint` with the model's tokenizer.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import llguidance

from ..errors import GrammarError
from . import gbnf, schema
from .constraint import compile_cached, spec_hash
from .runtime import MAX_SOURCE_BYTES, byte_tokenizer, validate_spec

__all__ = ["Grammar", "GrammarKind"]

GrammarKind = Literal["json_schema", "gbnf", "regex", "lark"]
_TOKEN_REF = re.compile(r"<\[|<[^\s<>\"/]+>")


@dataclass(frozen=True, eq=False)
class Grammar:
    """A compiled-and-checked constraint. `lark` is the llguidance Lark source it compiled
    to, `spec` the grammar string handed to llguidance. `uses_tokens` marks grammars that
    reference model tokens (`<[id]>`, `<name>`); they only mean something against a model
    vocabulary, so byte matching refuses them. `ignored` lists what a non-strict JSON
    schema dropped ("keyword at /path"); it is empty otherwise. `param` is the request
    field reported in errors."""

    kind: GrammarKind
    lark: str
    spec: str
    uses_tokens: bool = False
    ignored: tuple[str, ...] = ()
    param: str | None = None

    # -- constructors ------------------------------------------------------------------

    @classmethod
    def from_json_schema(
        cls, schema_: dict[str, Any] | bool, *, strict: bool = True, param: str = schema.PARAM
    ) -> Grammar:
        """JSON texts valid under `schema_` (draft 2020-12 semantics).

        Every keyword is enforced while sampling or refused with a SchemaError (a
        GrammarError naming the keyword and its JSON pointer); see llamay.grammar.schema
        for what is supported. With `strict=False`, keywords that can only narrow the
        valid set (uniqueItems, not, if/then/else, contains, unknown keywords/formats,
        oneOf treated as anyOf, ...) are dropped instead, and listed in `ignored` so the
        caller can tell the user: output then satisfies a looser schema.
        """
        _check_size(json.dumps(schema_, ensure_ascii=False), param)
        try:
            prepared = schema.prepare_schema(schema_, strict=strict)
        except schema.SchemaError as e:
            e.param = param
            raise
        ignored = list(prepared.ignored)
        lark = schema.schema_lark(prepared.schema)
        try:
            return cls._checked("json_schema", lark, param, ignored=ignored)
        except GrammarError as e:
            if strict or "oneOf" not in e.message:
                err = schema.compile_error(e.message.removeprefix("invalid JSON schema: "))
                err.param = param
                raise err from None
        # Non-strict: llguidance only keeps oneOf when branches provably exclude each
        # other; anyOf accepts a superset, so use it and say so.
        ignored.append("oneOf (treated as anyOf)")
        lark = schema.schema_lark(prepared.schema, coerce_one_of=True)
        try:
            return cls._checked("json_schema", lark, param, ignored=ignored)
        except GrammarError as e:
            err = schema.compile_error(e.message.removeprefix("invalid JSON schema: "))
            err.param = param
            raise err from None

    @classmethod
    def json_object(cls, *, param: str = schema.PARAM) -> Grammar:
        """Any JSON object (OpenAI's `{"type": "json_object"}`)."""
        return cls.from_json_schema({"type": "object"}, param=param)

    @classmethod
    def from_gbnf(cls, src: str, *, param: str = gbnf.PARAM) -> Grammar:
        """llama.cpp GBNF with root rule `root`, with GBNF's exact semantics."""
        _check_size(src, param)
        result = gbnf.gbnf_to_lark(src)
        return cls._checked("gbnf", result.lark, param, uses_tokens=result.uses_tokens)

    @classmethod
    def from_regex(cls, src: str, *, param: str = "regex") -> Grammar:
        """Texts fully matching `src`: Rust regex-crate syntax (no lookaround or
        backreferences), with `\\d` meaning [0-9]. `^`/`$` are accepted but redundant."""
        _check_size(src, param)
        return cls._checked("regex", "start: /" + llguidance.regex_to_lark(src, "d") + "/\n", param)

    @classmethod
    def from_lark(cls, src: str, *, param: str = "grammar") -> Grammar:
        """llguidance's Lark dialect as is (may embed `%json {...}` and special tokens).
        Note: JSON embedded this way skips the schema checks of `from_json_schema`."""
        _check_size(src, param)
        return cls._checked("lark", src, param, uses_tokens=bool(_TOKEN_REF.search(src)))

    @classmethod
    def _checked(
        cls, kind: GrammarKind, lark: str, param: str, *, uses_tokens: bool = False, ignored: Any = ()
    ) -> Grammar:
        spec = llguidance.LLMatcher.grammar_from_lark(lark)
        what = {"json_schema": "JSON schema", "gbnf": "GBNF grammar", "regex": "regex"}.get(kind, "grammar")
        validate_spec(spec, what=what, param=param)
        return cls(kind, lark, spec, uses_tokens, tuple(ignored), param)

    # -- model-free matching -----------------------------------------------------------

    @functools.cached_property
    def spec_hash(self) -> str:
        """sha256 of `spec`: the compile cache key."""
        return spec_hash(self.spec)

    def accepts_prefix(self, data: bytes) -> bool:
        """`data` is a legal prefix of some text the grammar accepts."""
        return self._run(data) is not None

    def matches(self, data: bytes) -> bool:
        """`data` is a complete text the grammar accepts."""
        matcher = self._run(data)
        return matcher is not None and matcher.is_accepting()

    def _run(self, data: bytes) -> llguidance.LLMatcher | None:
        if self.uses_tokens:
            raise GrammarError(
                "this grammar references model tokens; match it with a Constraint", param=self.param
            )
        if b"\xff" in data:  # never valid UTF-8; id 255 is a special token, not a byte
            return None
        matcher = compile_cached(self, byte_tokenizer()).matcher()
        # The byte tokenizer's token id for byte b is b.
        return matcher if matcher.try_consume_tokens(list(data)) == len(data) else None


def _check_size(src: str, param: str) -> None:
    if len(src.encode()) > MAX_SOURCE_BYTES:
        raise GrammarError(f"grammar or schema larger than {MAX_SOURCE_BYTES} bytes", param=param)
