"""Rebuild the real-world schema corpus, `bench/data/schemas.jsonl.gz`, from git checkouts.

    .venv/bin/python -m bench.coverage.corpus \\
        --git-dir SchemaStore/schemastore=PATH --git-dir openai/openai-openapi=PATH \\
        --git-dir box/box-openapi=PATH --git-dir twilio/twilio-oai=PATH [--out FILE]

Each PATH is a git directory (a bare clone, or a checkout's `.git`) of the repository
named before it; files are read from its HEAD with `git show`, so no work tree is needed.
Sources (see bench/data/README.md for their licences):

- every JSON schema under `src/schemas/json/` of the JSON Schema Store catalog;
- every object-shaped schema of `components/schemas` in the OpenAPI documents listed in
  OPENAPI, each made self-contained: the component is the root, the components it reaches
  through `#/components/schemas/...` references are copied into its `$defs`, and those
  references are rewritten to `#/$defs/...`.

Dropped, and counted on stderr: files that are not valid UTF-8 JSON objects (or
booleans), schemas whose serialisation (as the server measures it) exceeds MAX_SCHEMA_BYTES (the server
refuses larger ones), files missing from a partial clone, and components with references that cannot be made local.

The output is one JSON object per line, `{"source": "<family>:<name>", "schema": ...}`,
sorted by source, gzip-compressed with a zero timestamp: the same inputs give the same
bytes. The repositories' HEAD commits are printed to stderr for the README.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "data" / "schemas.jsonl.gz"
MAX_SCHEMA_BYTES = 512 * 1024  # llamay.grammar.runtime.MAX_SOURCE_BYTES
SCHEMASTORE = "SchemaStore/schemastore"
SCHEMASTORE_DIR = "src/schemas/json/"
# repository -> (corpus family, paths: a path ending in "/" takes every .json file under it)
OPENAPI: dict[str, tuple[str, tuple[str, ...]]] = {
    "openai/openai-openapi": ("openapi-openai", ("openapi.json",)),
    "box/box-openapi": ("openapi-box", ("openapi.json",)),
    "twilio/twilio-oai": ("openapi-twilio", ("spec/json/",)),
}
COMPONENT_PREFIX = "#/components/schemas/"


class Git:
    """Read-only access to one repository's HEAD through `git --git-dir`."""

    def __init__(self, git_dir: str) -> None:
        self.git_dir = git_dir

    def _run(self, *args: str) -> bytes:
        return subprocess.run(
            ["git", "--git-dir", self.git_dir, *args], capture_output=True, check=True
        ).stdout

    def head(self) -> str:
        return self._run("rev-parse", "HEAD").decode().strip()

    def files(self, prefix: str) -> list[str]:
        """Paths of HEAD's .json files at `prefix` (a file, or a folder ending in "/")."""
        if not prefix.endswith("/"):
            return [prefix]
        names = self._run("ls-tree", "-r", "--name-only", "HEAD", prefix).decode().splitlines()
        return sorted(n for n in names if n.endswith(".json"))

    def show(self, path: str) -> bytes | None:
        """The file's bytes, or None if its blob is missing (a partial clone)."""
        try:
            return self._run("show", f"HEAD:{path}")
        except subprocess.CalledProcessError:
            return None


def server_size(schema: Any) -> int:
    """Bytes of the serialisation the server measures against its size limit."""
    return len(json.dumps(schema, ensure_ascii=False).encode())


def parse_schema(raw: bytes) -> Any:
    """The JSON value in `raw`, or None unless it is strict UTF-8 JSON holding a schema
    (an object or a boolean). A byte-order mark is not JSON, so such files are dropped."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict | bool) else None


def schemastore(git: Git, dropped: Counter[str]) -> Iterator[tuple[str, Any]]:
    for path in git.files(SCHEMASTORE_DIR):
        raw = git.show(path)
        schema = None if raw is None else parse_schema(raw)
        if raw is None:
            dropped["schemastore: file missing from the clone"] += 1
        elif schema is None:
            dropped["schemastore: not a JSON schema"] += 1
        elif server_size(schema) > MAX_SCHEMA_BYTES:
            dropped["schemastore: over the size limit"] += 1
        else:
            yield "schemastore:" + path.removeprefix(SCHEMASTORE_DIR).removesuffix(".json"), schema


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


class Unresolvable(ValueError):
    """A reference that is not to another entry of components/schemas."""


def localise(node: Any, components: dict[str, Any], reached: set[str]) -> Any:
    """A copy of `node` with component references rewritten to `#/$defs/<name>`; the names
    it reaches are added to `reached`. Raises Unresolvable for any other reference."""
    if isinstance(node, list):
        return [localise(v, components, reached) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            if not value.startswith(COMPONENT_PREFIX):
                raise Unresolvable(value)
            name = _unescape(value.removeprefix(COMPONENT_PREFIX))
            if "/" in value.removeprefix(COMPONENT_PREFIX) or name not in components:
                raise Unresolvable(value)
            reached.add(name)
            out[key] = "#/$defs/" + _escape(name)
        else:
            out[key] = localise(value, components, reached)
    return out


def self_contained(name: str, components: dict[str, Any]) -> dict[str, Any]:
    """Component `name` as a standalone schema: its body at the root, every component it
    reaches (transitively) under `$defs`."""
    reached: set[str] = set()
    root = localise(components[name], components, reached)
    defs: dict[str, Any] = {}
    todo = sorted(reached)
    while todo:
        other = todo.pop()
        if other in defs:
            continue
        more: set[str] = set()
        defs[other] = localise(components[other], components, more)
        todo += sorted(more - defs.keys())
    if defs:
        if "$defs" in root:
            raise Unresolvable("a component that has its own $defs")
        root["$defs"] = dict(sorted(defs.items()))
    return root


def object_shaped(schema: Any) -> bool:
    """Components worth a structured-output request: objects and compositions (bare
    enums and scalars would only pad the corpus with trivial schemas)."""
    if not isinstance(schema, dict):
        return False
    return schema.get("type") == "object" or any(
        k in schema for k in ("properties", "allOf", "anyOf", "oneOf")
    )


def openapi(
    git: Git, family: str, paths: tuple[str, ...], dropped: Counter[str]
) -> Iterator[tuple[str, Any]]:
    for prefix in paths:
        for path in git.files(prefix):
            raw = git.show(path)
            try:
                doc = json.loads(raw if raw is not None else b"")
            except json.JSONDecodeError:
                dropped[f"{family}: document not JSON"] += 1
                continue
            components = (doc.get("components") or {}).get("schemas") or {}
            doc_name = path.rsplit("/", 1)[-1].removesuffix(".json")
            for name in sorted(components):
                if not object_shaped(components[name]):
                    continue
                try:
                    schema = self_contained(name, components)
                except Unresolvable:
                    dropped[f"{family}: non-local reference"] += 1
                    continue
                if server_size(schema) > MAX_SCHEMA_BYTES:
                    dropped[f"{family}: over the size limit"] += 1
                    continue
                label = name if len(paths) == 1 and not prefix.endswith("/") else f"{doc_name}/{name}"
                yield f"{family}:{label}", schema


def build(git_dirs: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The corpus lines, and a summary (counts, drops, commits) for stderr."""
    dropped: Counter[str] = Counter()
    entries: list[tuple[str, Any]] = []
    commits: dict[str, str] = {}
    if SCHEMASTORE in git_dirs:
        git = Git(git_dirs[SCHEMASTORE])
        commits[SCHEMASTORE] = git.head()
        entries += schemastore(git, dropped)
    for repo, (family, paths) in OPENAPI.items():
        if repo in git_dirs:
            git = Git(git_dirs[repo])
            commits[repo] = git.head()
            entries += openapi(git, family, paths, dropped)
    entries.sort(key=lambda e: e[0])
    kept = Counter(source.split(":", 1)[0] for source, _ in entries)
    summary = {"kept": dict(kept), "total": len(entries), "dropped": dict(dropped), "commits": commits}
    return [{"source": s, "schema": schema} for s, schema in entries], summary


def write(lines: list[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz:
        for line in lines:
            gz.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--git-dir", action="append", default=[], metavar="OWNER/NAME=PATH", help="a source repository"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    git_dirs = dict(item.split("=", 1) for item in args.git_dir)
    unknown = set(git_dirs) - {SCHEMASTORE, *OPENAPI}
    if unknown or not git_dirs:
        parser.error(f"expected --git-dir for some of {[SCHEMASTORE, *OPENAPI]}, got {sorted(git_dirs)}")
    lines, summary = build(git_dirs)
    write(lines, args.out)
    json.dump({**summary, "out": str(args.out), "bytes": args.out.stat().st_size}, sys.stderr, indent=2)
    sys.stderr.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
