"""JSON schema (drafts 4 to 2020-12) -> llguidance grammar, enforcing what can be enforced.

Every schema is first compiled here into a plain 2020-12 schema that llguidance handles
soundly (with the options of `keywords.JSON_OPTIONS` / .shape), then handed to it:

- draft differences are translated per schema object (.drafts); every local `$ref`
  (pointer, `$id`, anchor, `$recursiveRef`, simple `$dynamicRef`) is resolved here and
  rewritten to `#/$defs/rN`, a hoisted copy of its compiled target;
- annotations and unknown keywords (vendor keywords, typos, formats llamay does not
  enforce: those not in `keywords.FORMATS` or `formats.PATTERN_FORMATS`) never constrain
  anything, so they are dropped; json-pointer, relative-json-pointer and uri-template
  become patterns;
- assertions a grammar cannot express directly are rewritten where the rewrite is exact:
  `not` (.negation), provably exclusive `oneOf` (.oneof) as anyOf, if/then/else,
  dependentRequired/dependentSchemas, unevaluated* without applicators, and
  unevaluatedProperties next to allOf/$ref members whose properties are known (.unevaluated);
- what is left cannot be enforced: with strict=True that is a SchemaError naming the
  keyword and its JSON pointer; with strict=False it is dropped so the constraint only
  gets looser, and listed in `unenforced` as "keyword at /pointer".

Object properties are generated in schema order (llguidance's rule): every valid value
stays reachable, just not in every key order.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import GrammarError
from .checks import LiteralProblem, check_literals, count, precise, without_controls
from .drafts import ROOT_URI, Resolver, draft_of, pointer, translate
from .formats import PATTERN_FORMATS
from .keys import KeyReader, Unenforceable, enforce_keys, search_budget
from .keywords import COUNTS, ENFORCED, FORMAT_FIXES, FORMATS, UNSUPPORTED
from .negation import Negation
from .oneof import exclusive
from .shape import Layout, Shape, Tightening, layout_options
from .unevaluated import static_evaluated

__all__ = [
    "SchemaError",
    "PreparedSchema",
    "prepare_schema",
    "schema_lark",
    "compile_error",
    "draft_of",
    "PARAM",
]

PARAM = "response_format"
MAX_DEPTH = 128
_DROP = object()  # marks a keyword that compiles to nothing
_SIMPLE = {k for k, shape in ENFORCED.items() if shape is None} - {"$ref"}
_NOT_OBJECT = ["null", "boolean", "array", "number", "string"]


class SchemaError(GrammarError):
    """A JSON schema the compiler refuses. `keyword` is the JSON schema keyword at fault
    (or "false" for a schema that accepts nothing), `path` its JSON pointer."""

    def __init__(self, message: str, *, keyword: str, path: str) -> None:
        super().__init__(message, param=PARAM)
        self.keyword = keyword
        self.path = path


@dataclass
class PreparedSchema:
    """The compiled 2020-12 schema, ready for llguidance. `unenforced` lists the
    assertions dropped in non-strict mode ("keyword at /path"); `narrowed` lists where
    generation covers fewer valid values than the schema allows (still all valid)."""

    schema: dict[str, Any]
    unenforced: list[str] = field(default_factory=list)
    narrowed: list[str] = field(default_factory=list)
    draft: str = "draft2020-12"
    pending_one_of: list[tuple[dict[str, Any], str]] = field(default_factory=list)


def _fail(
    keyword: str, path: str, reason: str = "", what: str = "unsupported JSON schema keyword"
) -> SchemaError:
    where = path or "/"
    message = f"{what} '{keyword}' at {where}" + (f": {reason}" if reason else "")
    return SchemaError(message, keyword=keyword, path=where)


def prepare_schema(
    schema: Any, *, strict: bool = True, shape: Shape = "free", expand: bool = True
) -> PreparedSchema:
    """Compile `schema` (see the module docstring); raise SchemaError for what cannot be
    enforced (strict) or is malformed/unsatisfiable (always). `expand=False` skips the
    rewrites of conditionals and dependencies into anyOf (a fallback when llguidance
    cannot intersect them): they then count as unenforceable."""
    if schema is True:
        schema = {}
    if schema is False:
        raise SchemaError("unsatisfiable JSON schema at /: boolean schema 'false'", keyword="false", path="/")
    if not isinstance(schema, dict):
        raise SchemaError("a JSON schema must be an object or a boolean", keyword="type", path="/")
    if "x-guidance" in schema:
        # These options decide soundness (see JSON_OPTIONS); callers may not change them.
        raise _fail("x-guidance", "", "llamay fixes these options itself")
    compiler = _Compiler(schema, strict, shape, expand)
    root = compiler.walk(schema, "", ROOT_URI, 0, frozenset())
    if compiler.tight is not None:
        compiler.tight.apply()
    out = root if isinstance(root, dict) else ({} if root else {"not": {}})
    if compiler.defs:
        out = {**out, "$defs": compiler.defs}
    return PreparedSchema(out, compiler.unenforced, compiler.narrowed, compiler.draft, compiler.pending)


Ctx = frozenset[str] | bool  # see shape.Tightening


class _Compiler:
    def __init__(self, root: dict[str, Any], strict: bool, shape: Shape, expand: bool) -> None:
        self.draft = draft_of(root)
        self.declared = isinstance(root.get("$schema"), str)
        self.strict = strict
        self.expand = expand
        self.resolver = Resolver(root, self.draft)
        self.defs: dict[str, Any] = {}
        self.names: dict[Any, str] = {}
        self.unenforced: list[str] = []
        self.narrowed: list[str] = []
        self.pending: list[tuple[dict[str, Any], str]] = []
        self.widen: dict[int, frozenset[str]] = {}  # id(out) -> names to add to its properties
        self.tight = Tightening() if shape == "tight" else None

    def cannot(self, keyword: str, path: str, reason: str) -> None:
        """An assertion that cannot be enforced: refuse, or drop it and say so."""
        if self.strict:
            raise _fail(keyword, path, reason)
        self.unenforced.append(f"{keyword} at {path or '/'}")

    @contextlib.contextmanager
    def exactness(self) -> Iterator[list[str]]:
        """Collect what a sub-walk drops or narrows (into the yielded list) instead of
        reporting it: a negated subschema must be exact."""
        saved = self.unenforced, self.narrowed
        inner: list[str] = []
        self.unenforced = self.narrowed = inner
        try:
            yield inner
        finally:
            self.unenforced, self.narrowed = saved

    def walk(self, node: Any, path: str, base: str, depth: int, ctx: Ctx) -> Any:
        """The compiled copy of subschema `node` at JSON pointer `path`."""
        if isinstance(node, bool):
            return node
        if not isinstance(node, dict):
            raise SchemaError(f"invalid JSON schema at {path or '/'}: expected an object or a boolean",
                              keyword="type", path=path or "/")  # fmt: skip
        if depth >= MAX_DEPTH:
            raise _fail(
                "type",
                path,
                f"subschemas may nest at most {MAX_DEPTH} deep",
                "JSON schema too deep at keyword",
            )
        base = self.resolver.base_of(node, base)
        src = translate(node, self.draft, self.declared)
        if "propertyNames" in src:
            src = self.key_names(src, path, base)
        out: dict[str, Any] = {}
        extra: list[Any] = []  # rewrites intersected with the node (allOf members)
        inner = True if Tightening.merges_children(src) else ctx
        for key, value in src.items():
            here = pointer(path, key)
            if key == "multipleOf" and not precise(value):
                self.cannot(key, path, "too many significant digits")
            elif key == "format" and value in PATTERN_FORMATS:
                extra.append({"pattern": PATTERN_FORMATS[value]})
            elif key in _SIMPLE:
                checked = _simple(key, value, path)
                if checked is not _DROP:
                    out[key] = (
                        without_controls(checked)
                        if key == "pattern" and isinstance(checked, str)
                        else checked
                    )
            elif key in ("properties", "patternProperties"):
                if not isinstance(value, dict) or not all(isinstance(v, dict | bool) for v in value.values()):
                    raise _fail(key, path, "must map names to schemas", "invalid JSON schema keyword")
                rename = without_controls if key == "patternProperties" else str
                out[key] = {
                    rename(k): self.walk(v, pointer(here, k), base, depth + 1, ctx) for k, v in value.items()
                }
            elif key in ("additionalProperties", "items"):
                if not isinstance(value, dict | bool):
                    raise _fail(key, path, "must be a schema", "invalid JSON schema keyword")
                out[key] = self.walk(value, here, base, depth + 1, ctx)
            elif key in ("prefixItems", "allOf", "anyOf", "oneOf"):
                ok = isinstance(value, list) and all(isinstance(v, dict | bool) for v in value)
                if not ok or not (value or key == "prefixItems"):
                    raise _fail(
                        key, path, "must be a non-empty list of schemas", "invalid JSON schema keyword"
                    )
                sub = True if key == "allOf" else ctx if key == "prefixItems" else inner
                walked = [self.walk(v, pointer(here, i), base, depth + 1, sub) for i, v in enumerate(value)]
                if key == "oneOf":
                    self.one_of(walked, extra, here)
                else:
                    out[key] = walked
            elif key in ("$ref", "$recursiveRef", "$dynamicRef"):
                ref = self.ref(key, value, path, base, depth, inner)
                if ref is not None and "$ref" not in out:
                    out.update(ref)
                elif ref is not None:
                    extra.append(ref)
            else:
                self.other(key, value, src, path, base, depth, extra, out)
        for name in self.widen.pop(id(out), ()):
            out.setdefault("properties", {}).setdefault(name, True)
        if not self.expand and len(out.get("patternProperties", {})) > 1:
            # Fallback: llguidance needs disjoint patterns. Any extra key may then take a
            # value valid under any pattern's schema or additionalProperties (looser).
            patterns = out.pop("patternProperties")
            out["additionalProperties"] = {
                "anyOf": [*patterns.values(), out.get("additionalProperties", True)]
            }
            self.cannot("patternProperties", path, "patterns that may overlap are not supported")
        if "minProperties" in out and _too_many_keys(out):
            del out["minProperties"]
            self.cannot(
                "minProperties",
                path,
                "needs two or more keys beyond 'required', and generated additional keys may repeat",
            )
        for key in ("maxLength", "minLength"):
            if key in out and costly_with_pattern(out.get("pattern"), out[key]):
                del out[key]
                self.cannot(
                    key, path, "too large to combine with this pattern's counted repetitions while sampling"
                )
        fix = FORMAT_FIXES.get(out.get("format", ""))
        if fix is not None:
            extra.append(fix)
        if extra:
            out["allOf"] = [*out.get("allOf", []), *extra]
        if self.tight is not None and ctx is not True and Tightening.is_candidate(src):
            self.tight.candidates.append((out, ctx))
        return out

    # -- references ----------------------------------------------------------------------

    def ref(self, key: str, value: Any, path: str, base: str, depth: int, ctx: Ctx) -> dict[str, Any] | None:
        """`{"$ref": "#/$defs/rN"}` for a local reference (compiling its target once)."""
        if not isinstance(value, str):
            raise _fail(key, path, "must be a string", "invalid JSON schema keyword")
        if key == "$ref":
            target, exact = self.resolver.resolve(value, base), True
        else:
            target, exact = self.resolver.dynamic_target(key, value, base)
        if target is None or not exact:
            why = (
                "only references within the schema are followed"
                if target is None
                else ("the dynamic scope decides its target")
            )
            self.cannot(key, path, f"cannot resolve {json.dumps(value)}: {why}")
            return None
        node, target_base, target_path = target
        ident = node if isinstance(node, bool) else id(node)
        name = self.names.get(ident)
        if name is None:
            name = self.names[ident] = f"r{len(self.names)}"
            self.defs[name] = {}  # placeholder: recursion ends here
            self.defs[name] = self.walk(node, target_path, target_base, depth + 1, frozenset({name}))
        if self.tight is not None:
            self.tight.uses.append((name, ctx))
        return {"$ref": f"#/$defs/{name}"}

    # -- assertions rewritten or dropped ----------------------------------------------

    def key_names(self, src: dict[str, Any], path: str, base: str) -> dict[str, Any]:
        """`src` with its `propertyNames` enforced through the object's other keywords
        (.keys), or dropped where that cannot be exact."""
        try:
            with search_budget():
                keys = KeyReader(self.resolver, self.draft, self.declared).read(src["propertyNames"], base)
                return enforce_keys(src, keys, self.alias, path)
        except LiteralProblem as e:
            raise _fail("propertyNames", path, e.reason, e.what) from None
        except Unenforceable as e:
            self.cannot("propertyNames", path, e.reason)
            return {k: v for k, v in src.items() if k != "propertyNames"}

    def alias(self, node: Any, path: str) -> Any:
        """A stand-in for subschema `node` (at `path`) that a rewrite may use in several
        places: a reference, so it is compiled once."""
        return node if isinstance(node, bool) else {"$ref": self.resolver.register(node, path)}

    def one_of(self, branches: list[Any], extra: list[Any], here: str) -> None:
        if len(branches) == 1 or exclusive(branches, self.defs):
            extra.append({"anyOf": branches})  # sound: at most one branch can match
        else:
            holder = {"oneOf": branches}
            extra.append(holder)
            self.pending.append((holder, here))

    def negation(self, value: Any, path: str, base: str, depth: int) -> Any:
        here = pointer(path, "not")
        with self.exactness() as lost:
            walked = self.walk(value, here, base, depth + 1, True)
        negator = Negation(self.defs)
        neg = None if lost else negator.negate(walked)
        if neg is None:
            self.cannot("not", path, "this negation has no positive form a grammar can enforce")
            return _DROP
        if negator.narrowed:
            self.narrowed.append(f"not at {path or '/'}")
        return neg

    def other(self, key: str, value: Any, src: dict[str, Any], path: str, base: str, depth: int,
              extra: list[Any], out: dict[str, Any]) -> None:  # fmt: skip
        """Keywords without a direct llguidance counterpart; anything not handled here is
        an annotation (or unknown) and constrains nothing."""
        here = pointer(path, key)
        if key == "not":
            neg = self.negation(value, path, base, depth)
            if neg is not _DROP:
                extra.append(neg)
        elif key == "if" and ("then" in src or "else" in src):
            extra.append(self.conditional(src, path, base, depth))
        elif key == "uniqueItems":
            if not _unique_is_noop(src):
                self.cannot(key, path, "a grammar cannot keep array items distinct")
        elif key == "contains":
            if src.get("minContains") != 0 or "maxContains" in src:
                self.cannot(key, path, "'contains' cannot be enforced while sampling")
        elif key in ("dependentRequired", "dependentSchemas"):
            if not isinstance(value, dict):
                raise _fail(key, path, "must be an object", "invalid JSON schema keyword")
            for name, dep in value.items():
                rewritten = self.dependency(key, name, dep, pointer(here, name), base, depth)
                if rewritten is not None:
                    extra.append(rewritten)
        elif key in ("unevaluatedProperties", "unevaluatedItems"):
            self.unevaluated(key, value, src, path, base, depth, out)

    def conditional(self, src: dict[str, Any], path: str, base: str, depth: int) -> Any:
        """if/then/else as anyOf[allOf[if, then], allOf[not if, else]]; if `if` has no
        exact negation, the looser anyOf[then, else] (listed)."""
        then = self.walk(src.get("then", True), pointer(path, "then"), base, depth + 1, True)
        other = self.walk(src.get("else", True), pointer(path, "else"), base, depth + 1, True)
        with self.exactness() as lost:
            cond = self.walk(src["if"], pointer(path, "if"), base, depth + 1, True)
        negator = Negation(self.defs)
        neg = None if lost or not self.expand else negator.negate(cond)
        if neg is None or negator.narrowed:
            self.cannot("if", path, "this condition has no negation a grammar can enforce")
            return {"anyOf": [then, other]}
        return {"anyOf": [{"allOf": [cond, then]}, {"allOf": [neg, other]}]}

    def dependency(self, key: str, name: str, dep: Any, here: str, base: str, depth: int) -> Any:
        """ "if `name` is present then ..." as anyOf[name absent, ...]."""
        if key == "dependentRequired":
            if not isinstance(dep, list) or not all(isinstance(k, str) for k in dep):
                raise _fail(key, here, "must list property names", "invalid JSON schema keyword")
            then: Any = {"required": [name, *dep]}
            if not dep:
                return None
        else:
            then = {"allOf": [{"required": [name]}, self.walk(dep, here, base, depth + 1, True)]}
        if not self.expand:
            self.cannot(key, here.rsplit("/", 1)[0], "property dependencies cannot be enforced here")
            return None
        return {"anyOf": [{"properties": {name: False}}, then]}

    def unevaluated(self, key: str, value: Any, src: dict[str, Any], path: str, base: str, depth: int,
                    out: dict[str, Any]) -> None:  # fmt: skip
        # Without in-place applicators, "unevaluated" means "not matched by this object's
        # own properties/patternProperties (items/prefixItems)": additionalProperties/items.
        if value is True or value == {}:
            return
        plain = key.replace("unevaluated", "additional") if key == "unevaluatedProperties" else "items"
        applicators = ("allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "$recursiveRef", "if",
                       "dependentSchemas", "contains", "dependencies")  # fmt: skip
        if any(k in src for k in applicators):
            known = None
            if key == "unevaluatedProperties":
                known = static_evaluated(src, base, self._target)
            if known is None or known.patterns:
                self.cannot(key, path, "annotation-dependent keywords are not supported next to applicators")
            elif not known.every and plain not in src:
                # The members' names become the object's own (any value: the members still
                # constrain it), and everything else is "additional".
                out[plain] = self.walk(value, pointer(path, key), base, depth + 1, True)
                self.widen[id(out)] = known.names
        elif plain not in src:
            out[plain] = self.walk(value, pointer(path, key), base, depth + 1, True)

    def _target(self, ref: str, base: str) -> tuple[Any, str] | None:
        found = self.resolver.resolve(ref, base)
        return None if found is None else (found[0], found[1])


def _simple(key: str, value: Any, path: str) -> Any:
    """A keyword without subschemas, checked; _DROP for annotations (unknown formats)."""
    try:
        if key in COUNTS:
            return count(value)
        if key == "format":
            return value if value in FORMATS else _DROP
        if key in ("const", "enum"):
            check_literals([value] if key == "const" else value)
    except LiteralProblem as e:
        raise _fail(key, path, e.reason, e.what) from None
    return value


# llguidance intersects a string's pattern with its length bound lexically; the automaton
# grows with (the largest counted repetition of the pattern) x (the bound), and past about
# this product its lexer runs out of fuel while generating (the matcher then fails at the
# first bytes, refusing every value). Measured with the byte tokenizer: 99 x 500 works,
# 99 x 1000 fails.
_LEXER_PRODUCT = 50_000
_COUNTED = re.compile(r"\{([0-9]{1,9})(?:,([0-9]{0,9}))?\}")


def costly_with_pattern(pattern: Any, bound: Any) -> bool:
    """Whether a length `bound` next to `pattern` would exhaust llguidance's lexer."""
    if not isinstance(pattern, str) or not isinstance(bound, int):
        return False
    counts = [int(hi) if hi else int(lo) for lo, hi in _COUNTED.findall(pattern)]
    return bool(counts) and max(counts) * bound > _LEXER_PRODUCT


def _unique_is_noop(node: dict[str, Any]) -> bool:
    max_items = node.get("maxItems")
    return node.get("uniqueItems") is not True or (isinstance(max_items, int | float) and max_items <= 1)


def _too_many_keys(node: dict[str, Any]) -> bool:
    # llguidance counts keys as written but does not keep additional keys distinct, so
    # `{"k":1,"k":2}` would count as two properties yet parse as one. Safe only while at
    # most one key beyond the distinct required ones is needed.
    minimum = node.get("minProperties")
    required = node.get("required")
    n_required = len(set(required)) if isinstance(required, list) else 0
    return isinstance(minimum, int) and minimum - n_required >= 2


def schema_lark(schema: dict[str, Any], *, layout: Layout = "free", coerce_one_of: bool = False) -> str:
    """The Lark grammar (llguidance dialect) generating exactly the JSON texts chosen by
    `schema`, a result of `prepare_schema`, in `layout` (see .shape)."""
    options = dict(layout_options(layout), coerce_one_of=coerce_one_of)
    return "start: %json " + json.dumps({**schema, "x-guidance": options}, ensure_ascii=False)


# llguidance's compile errors name no location; map each to the keyword at fault. Order
# matters: the first needle found in the message wins.
_ERROR_KEYWORDS = (
    ("oneOf", "oneOf"),
    ("patternProperty", "patternProperties"),
    ("min/maxProperties", "minProperties"),
    ("Unknown format", "format"),
    ("Resource ", "$ref"),
    ("anyOf is empty", "anyOf"),
    ("schema is false", "false"),
)


def compile_error(message: str) -> SchemaError:
    """Turn an llguidance JSON compile error into a SchemaError naming a keyword."""
    lines = message.strip().splitlines() or ["schema error"]
    # The first line reads "at 1(8): failed to compile JSON schema: <reason>" (the
    # position is in our Lark wrapper); the rest echoes the grammar source.
    reason = lines[0].split("failed to compile JSON schema: ", 1)[-1]
    path = "/"
    for line in lines:
        if "json-schema:///#" in line:
            path = line.split("json-schema:///#", 1)[1].split()[0] or "/"
    keyword = next((kw for needle, kw in _ERROR_KEYWORDS if needle in reason), None)
    if keyword is None:
        quoted = re.findall(r"""['"]([$A-Za-z]+)['"]""", reason)
        known = [k for k in quoted if k in ENFORCED or k in UNSUPPORTED]
        keyword = known[0] if known else "type"  # e.g. an empty intersection of types
    return SchemaError(f"JSON schema keyword '{keyword}' at {path} cannot be enforced: {reason}",
                       keyword=keyword, path=path)  # fmt: skip
