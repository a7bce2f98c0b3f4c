"""`Grammar`: a validated, model-independent output constraint.

A Grammar is built from a JSON schema, llama.cpp GBNF, a regex or llguidance Lark; every
constructor validates it fully and raises GrammarError if it cannot be enforced. It can
be checked against bytes without any model (`accepts_prefix`, `matches`), and the engine
turns it into a per-request `Constraint` through the model's compile cache.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import llguidance

from ..errors import GrammarError
from . import bound, gbnf
from . import schema as jschema
from .constraint import byte_compile_cache, spec_hash
from .runtime import MAX_SOURCE_BYTES, validate_spec
from .shape import Layout, Shape

__all__ = ["Grammar", "GrammarKind"]

GrammarKind = Literal["json_schema", "gbnf", "regex", "lark"]
_TOKEN_REF = re.compile(r"<\[|<[^\s<>\"/]+>")


@dataclass(frozen=True, eq=False)
class Grammar:
    """A compiled-and-checked constraint. `lark` is the llguidance Lark source it compiled
    to, `spec` the grammar string handed to llguidance. `uses_tokens` marks grammars that
    reference model tokens (`<[id]>`, `<name>`); they only mean something against a model
    vocabulary, so byte matching refuses them. `param` is the request field reported in
    errors.

    For JSON schemas: `schema` is the caller's original schema (for `validate`),
    `unenforced` lists the assertions a non-strict schema dropped ("keyword at /path";
    empty means every generated text is valid and, `narrowed` aside, every valid value can
    be generated), `narrowed` lists where generation covers fewer valid values than the
    schema allows, `max_bytes` bounds the length of any generated text (None if
    unbounded), and `layout` is the whitespace layout it was compiled in (with "indented"
    the engine keeps to the one canonical layout, see layout.py)."""

    kind: GrammarKind
    lark: str
    spec: str
    uses_tokens: bool = False
    unenforced: tuple[str, ...] = ()
    param: str | None = None
    schema: dict[str, Any] | bool | None = None
    max_bytes: int | None = None
    narrowed: tuple[str, ...] = ()
    layout: str | None = None

    @property
    def ignored(self) -> tuple[str, ...]:
        """Older name of `unenforced`."""
        return self.unenforced

    # -- constructors ------------------------------------------------------------------

    @classmethod
    def from_json_schema(
        cls,
        schema_: dict[str, Any] | bool,
        *,
        strict: bool = True,
        param: str = jschema.PARAM,
        layout: Layout = "free",
        shape: Shape = "free",
    ) -> Grammar:
        """JSON texts valid under `schema_` (drafts 4, 6, 7, 2019-09, 2020-12 by `$schema`;
        2020-12 if undeclared), written in `layout` ("compact", "spaced", "indented", "free") with
        objects closed where safe when `shape="tight"` (see llamay.grammar.shape).

        Annotations, unknown keywords and unknown formats never cause a refusal. An
        assertion that cannot be enforced raises SchemaError (a GrammarError naming the
        keyword and its JSON pointer) when `strict`; otherwise it is dropped so the
        constraint only gets looser, and listed in `unenforced`. Malformed or
        unsatisfiable schemas are refused either way.
        """
        original = copy.deepcopy(schema_)
        _check_size(json.dumps(schema_, ensure_ascii=False), param)
        try:
            prepared = jschema.prepare_schema(schema_, strict=strict, shape=shape)
            _settle_one_of(prepared, strict)
            return cls._from_prepared(prepared, original, param, layout)
        except jschema.SchemaError as e:
            if strict or not isinstance(e, _CompileFailure):
                e.param = param
                raise
        # llguidance could not intersect a rewritten conditional or dependency with its
        # neighbours: drop those rewrites (listed) and try once more.
        prepared = jschema.prepare_schema(schema_, strict=False, shape=shape, expand=False)
        _settle_one_of(prepared, strict)
        try:
            return cls._from_prepared(prepared, original, param, layout)
        except jschema.SchemaError as e:
            e.param = param
            raise

    @classmethod
    def _from_prepared(
        cls, prepared: jschema.PreparedSchema, original: Any, param: str, layout: Layout
    ) -> Grammar:
        lark = jschema.schema_lark(prepared.schema, layout=layout)
        try:
            spec = _compile_lark(lark, "json_schema", param)
        except GrammarError as e:
            err = _CompileFailure.wrap(e.message.removeprefix("invalid JSON schema: "))
            raise err from None
        return cls(
            "json_schema", lark, spec, False, tuple(prepared.unenforced), param,
            original, bound.max_bytes(prepared.schema, layout), tuple(prepared.narrowed), layout,
        )  # fmt: skip

    @classmethod
    def json_object(cls, *, param: str = jschema.PARAM) -> Grammar:
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
    def _checked(cls, kind: GrammarKind, lark: str, param: str, *, uses_tokens: bool = False) -> Grammar:
        return cls(kind, lark, _compile_lark(lark, kind, param), uses_tokens, (), param)

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
        matcher = byte_compile_cache().get(self).matcher()
        # The byte tokenizer's token id for byte b is b.
        return matcher if matcher.try_consume_tokens(list(data)) == len(data) else None


def _compile_lark(lark: str, kind: GrammarKind, param: str) -> str:
    spec = llguidance.LLMatcher.grammar_from_lark(lark)
    what = {"json_schema": "JSON schema", "gbnf": "GBNF grammar", "regex": "regex"}.get(kind, "grammar")
    validate_spec(spec, what=what, param=param)
    return str(spec)


class _CompileFailure(jschema.SchemaError):
    """llguidance refused a compiled schema (no location of ours is known)."""

    @classmethod
    def wrap(cls, message: str) -> _CompileFailure:
        err = jschema.compile_error(message)
        return cls(err.message, keyword=err.keyword, path=err.path)


def _settle_one_of(prepared: jschema.PreparedSchema, strict: bool) -> None:
    """Each oneOf the compiler could not prove exclusive: keep it if llguidance proves it
    (compiling it alone, with the definitions it may reference), else refuse it (strict)
    or turn it into anyOf (a superset) and list it."""
    defs = prepared.schema.get("$defs", {})
    for holder, path in prepared.pending_one_of:
        probe = {"oneOf": holder["oneOf"], **({"$defs": defs} if defs else {})}
        try:
            _compile_lark(jschema.schema_lark(probe), "json_schema", jschema.PARAM)
            continue
        except GrammarError:
            pass
        if strict:
            raise jschema._fail("oneOf", path.rsplit("/", 1)[0], "its branches are not provably exclusive")
        holder["anyOf"] = holder.pop("oneOf")
        prepared.unenforced.append(f"oneOf at {path.rsplit('/', 1)[0] or '/'}")


def _check_size(src: str, param: str) -> None:
    if len(src.encode()) > MAX_SOURCE_BYTES:
        raise GrammarError(f"grammar or schema larger than {MAX_SOURCE_BYTES} bytes", param=param)
