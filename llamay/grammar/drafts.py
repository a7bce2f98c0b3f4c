"""JSON Schema drafts 4, 6, 7, 2019-09 and 2020-12: detection, `$ref` resolution and
translation of one schema object's keywords to their 2020-12 form.

The compiler (.schema) walks a schema in 2020-12 terms only. Everything that differs
between drafts is decided here, per schema object:

- draft 4 `id` and later `$id` set the base URI (they are never properties); a fragment-only
  id ("#foo", drafts 4-7) names an anchor like 2019-09's `$anchor`;
- in drafts 4-7 the siblings of `$ref` are ignored, so they are dropped;
- boolean `exclusiveMinimum`/`exclusiveMaximum` (draft 4) become numeric;
- `dependencies` splits into `dependentRequired` (array form) and `dependentSchemas`;
- array-form `items` + `additionalItems` become `prefixItems` + `items`;
- `$recursiveRef` (2019-09) is resolved like a `$ref` (see `Resolver.dynamic`);
- keywords a declared draft does not have (`const` and `contains` in draft 4, `if` before
  draft 7, `dependentRequired` or `prefixItems` before 2019-09/2020-12, ...) are unknown
  there, so annotations, and are dropped.

A schema without `$schema` (or with an unknown one) is read as 2020-12, tolerating older
forms where they cannot mean anything else (`definitions`, `dependencies`, boolean
exclusive bounds, array `items`). Undeclared draft-4 `id` is ambiguous and stays an
annotation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

__all__ = ["draft_of", "translate", "Resolver", "Target", "ROOT_URI", "subschemas"]

ROOT_URI = "https://llamay.invalid/root.json"  # base of a schema without an absolute $id
_ALIAS_URI = "https://llamay.invalid/alias/"  # subschemas a rewrite refers to (Resolver.register)
_DRAFTS = {
    "json-schema.org/draft-04/schema": "draft4",
    "json-schema.org/draft-06/schema": "draft6",
    "json-schema.org/draft-07/schema": "draft7",
    "json-schema.org/draft/2019-09/schema": "draft2019-09",
    "json-schema.org/draft/2020-12/schema": "draft2020-12",
}
OLD = ("draft4", "draft6", "draft7")  # $ref siblings ignored, `definitions`, `dependencies`
# Assertions and applicators a declared draft does not have (later drafts added them):
# there they are unknown keywords, so annotations.
_SINCE_2019 = (
    "dependentRequired", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties",
    "minContains", "maxContains",
)  # fmt: skip
_LATER: dict[str, tuple[str, ...]] = {
    "draft4": ("const", "contains", "propertyNames", "if", "then", "else", *_SINCE_2019, "prefixItems"),
    "draft6": ("if", "then", "else", *_SINCE_2019, "prefixItems"),
    "draft7": (*_SINCE_2019, "prefixItems"),
    "draft2019-09": ("prefixItems",),
}

Target = tuple[Any, str, str]  # (subschema, its base URI, its JSON pointer from the root)


def draft_of(schema: Any) -> str:
    """The draft a schema declares with `$schema` ("draft4" ... "draft2020-12"); a schema
    that declares none, or one not listed (a custom metaschema), counts as 2020-12."""
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if not isinstance(uri, str):
        return "draft2020-12"
    key = uri.removeprefix("https://").removeprefix("http://").rstrip("#")
    return _DRAFTS.get(key, "draft2020-12")


def _id_of(node: dict[str, Any], draft: str) -> str | None:
    raw = node.get("id" if draft == "draft4" else "$id")
    if not isinstance(raw, str) or (draft in OLD and "$ref" in node):
        return None  # drafts 4-7: a $ref's sibling id is ignored too
    return raw


def translate(node: dict[str, Any], draft: str, declared: bool) -> dict[str, Any]:
    """`node`'s keywords in 2020-12 form (a new dict; subschemas are not translated).
    `declared` says whether the draft came from `$schema` (else older forms are only
    tolerated where unambiguous)."""
    if draft in OLD and "$ref" in node:
        return {"$ref": node["$ref"]}
    out = dict(node)
    if declared:
        for key in _LATER.get(draft, ()):
            out.pop(key, None)  # not a keyword of this draft: an annotation
    if draft == "draft4":
        out.pop("id", None)
    for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = out.get(key)
        if isinstance(flag, bool):  # draft 4: a modifier of minimum/maximum
            del out[key]
            if flag and bound in out:
                out[key] = out.pop(bound)
    deps = out.pop("dependencies", None)
    if isinstance(deps, dict) and (draft in OLD or not declared):
        required = {k: v for k, v in deps.items() if isinstance(v, list)}
        schemas = {k: v for k, v in deps.items() if not isinstance(v, list)}
        if required:
            out["dependentRequired"] = {**required, **out.get("dependentRequired", {})}
        if schemas:
            out["dependentSchemas"] = {**schemas, **out.get("dependentSchemas", {})}
    items = out.get("items")
    if isinstance(items, list):
        out["prefixItems"] = items
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
        else:
            del out["items"]
    else:
        out.pop("additionalItems", None)  # ignored unless items is an array
    # Keywords of other drafts are unknown (annotations) where a draft is declared.
    if draft != "draft2020-12":
        out.pop("$dynamicRef", None)
    if draft != "draft2019-09" and declared:
        out.pop("$recursiveRef", None)
    return out


# Keywords whose value is a subschema / a map of them / a list of them (all drafts).
_SINGLE = (
    "additionalProperties", "items", "additionalItems", "not", "contains", "propertyNames",
    "if", "then", "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema",
)  # fmt: skip
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


def subschemas(node: dict[str, Any]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(relative pointer parts, subschema) for every direct subschema of `node`."""
    for key in _SINGLE:
        if isinstance(node.get(key), dict | bool):
            yield (key,), node[key]
    for key in _MAP:
        if isinstance(node.get(key), dict):
            for name, sub in node[key].items():
                if isinstance(sub, dict | bool):
                    yield (key, name), sub
    for key in _LIST:
        if isinstance(node.get(key), list):
            for i, sub in enumerate(node[key]):
                if isinstance(sub, dict | bool):
                    yield (key, str(i)), sub


def pointer(path: str, *parts: str | int) -> str:
    """`path` extended by `parts`, escaped as a JSON pointer."""
    for p in parts:
        path += "/" + str(p).replace("~", "~0").replace("/", "~1")
    return path


class Resolver:
    """Local `$ref` resolution over one document: JSON pointers (with ~0/~1 and percent
    escapes), `$id` resources and `$anchor`/plain-name anchors. Nothing is ever fetched;
    a reference outside the document resolves to None."""

    def __init__(self, root: Any, draft: str) -> None:
        self.draft = draft
        self.root = root
        self.resources: dict[str, tuple[Any, str]] = {ROOT_URI: (root, "")}
        self.anchors: dict[tuple[str, str], Target] = {}
        self.dynamic: dict[str, list[str]] = {}  # dynamic anchor name -> resource URIs
        self.recursive: set[str] = set()  # resources with $recursiveAnchor: true
        self.bases: dict[int, str] = {}
        self._index(root, ROOT_URI, "", 0)

    def base_of(self, node: Any, parent_base: str) -> str:
        """The base URI in effect inside `node`."""
        if isinstance(node, dict):
            known = self.bases.get(id(node))
            if known is not None:
                return known
            raw = _id_of(node, self.draft)
            if raw is not None and not raw.startswith("#"):
                return urldefrag(urljoin(parent_base, raw))[0]
        return parent_base

    def _index(self, node: Any, base: str, path: str, depth: int) -> None:
        if not isinstance(node, dict) or depth > 256:
            return
        raw = _id_of(node, self.draft)
        if raw is not None:
            uri, frag = urldefrag(urljoin(base, raw))
            if raw.startswith("#"):
                uri = base
            else:
                base = uri
                self.resources.setdefault(uri, (node, path))
            if frag and not frag.startswith("/"):
                self.anchors[(uri, frag)] = (node, base, path)
        self.bases[id(node)] = base
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                self.anchors.setdefault((base, node[key]), (node, base, path))
        if isinstance(node.get("$dynamicAnchor"), str):
            self.dynamic.setdefault(node["$dynamicAnchor"], []).append(base)
        if node.get("$recursiveAnchor") is True:
            self.recursive.add(base)
        if self.draft in OLD and "$ref" in node:
            # Siblings of $ref are not evaluated, but pointers may still reach into them.
            return self._index_plain(node, base, path, depth)
        for parts, sub in subschemas(node):
            self._index(sub, base, pointer(path, *parts), depth + 1)

    def _index_plain(self, node: dict[str, Any], base: str, path: str, depth: int) -> None:
        for parts, sub in subschemas(node):
            if isinstance(sub, dict):
                self.bases.setdefault(id(sub), base)
                self._index(sub, base, pointer(path, *parts), depth + 1)

    def register(self, node: dict[str, Any], path: str) -> str:
        """A URI that resolves to `node`, a subschema of this document at JSON pointer
        `path` (its base stays the one it has in the document)."""
        uri = f"{_ALIAS_URI}{len(self.resources)}.json"
        self.resources[uri] = (node, path)
        return uri

    def resolve(self, ref: str, base: str) -> Target | None:
        """The subschema `ref` names, seen from `base`, or None if it is not local."""
        uri, frag = urldefrag(urljoin(base, ref))
        if not frag or frag.startswith("/"):
            found = self.resources.get(uri)
            if found is None:
                return None
            node, path = found
            for raw in frag.split("/")[1:] if frag else []:
                part = unquote(raw).replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and part in node:
                    node = node[part]
                elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                    node = node[int(part)]
                else:
                    return None
                path = pointer(path, part)
            if not isinstance(node, dict | bool):
                return None
            return node, self.bases.get(id(node), uri) if isinstance(node, dict) else uri, path
        return self.anchors.get((uri, unquote(frag)))

    def dynamic_target(self, key: str, ref: str, base: str) -> tuple[Target | None, bool]:
        """Resolve `$recursiveRef` (key "$recursiveRef") or `$dynamicRef`. Returns (target,
        exact): exact is False when the dynamic scope could pick a different schema than
        the one returned (several resources compete), so the caller must not rely on it.

        The outermost dynamic scope is always the document root, so when the root carries
        the anchor it wins wherever the reference is evaluated; when only one resource
        carries it, the static target is the answer."""
        static = self.resolve(ref, base)
        if static is None:
            return None, False
        node = static[0]
        if key == "$recursiveRef":
            if not (isinstance(node, dict) and node.get("$recursiveAnchor") is True):
                return static, True
            if ROOT_URI in self.recursive or _root_id_in(self.recursive, self.root, self.draft):
                return (self.root, self.base_of(self.root, ROOT_URI), ""), True
            return static, len(self.recursive) <= 1
        frag = urldefrag(urljoin(base, ref))[1]
        if (
            not frag
            or frag.startswith("/")
            or not isinstance(node, dict)
            or node.get("$dynamicAnchor") != frag
        ):
            return static, True  # not bookended by a $dynamicAnchor: a plain $ref
        owners = self.dynamic.get(frag, [])
        root_base = self.base_of(self.root, ROOT_URI)
        if root_base in owners:
            return self.anchors.get((root_base, frag)), True
        return static, len(owners) <= 1


def _root_id_in(uris: set[str], root: Any, draft: str) -> bool:
    raw = _id_of(root, draft) if isinstance(root, dict) else None
    return raw is not None and urldefrag(urljoin(ROOT_URI, raw))[0] in uris
