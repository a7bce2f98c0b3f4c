"""Local files as pull sources: `path/to/model.gguf`, `file:path` or `file:///abs/path`.

The file is copied into the store (hashed on the way), not linked: a blob is named by its
digest, and a hard link would let a later edit of the original change a blob's content under
its name. The first part of a split set brings the others, found beside it by their names.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from llamay.errors import ModelNotFound
from llamay.store.names import ModelName, sanitize_part, split_names, split_set
from llamay.store.sources import FetchContext, PartPlan, PullPlan, SourceEnv, Staged, origin_key

__all__ = ["LocalSource"]

_BLOCK = 1 << 20


def _path_of(spec: str) -> Path:
    if spec.startswith("file://"):
        spec = spec.removeprefix("file://")
    elif spec.startswith("file:"):
        spec = spec.removeprefix("file:")
    return Path(spec).expanduser()


class LocalSource:
    """Files on this machine (see the module docstring)."""

    def accepts(self, spec: str, env: SourceEnv) -> bool:
        return _path_of(spec).is_file()

    def plan(self, spec: str, env: SourceEnv) -> PullPlan:
        path = _path_of(spec)
        if not path.is_file():
            raise ModelNotFound(f"no such file {path}", param="model")
        path = path.resolve()
        split = split_set(path.name)
        if split is None:
            files = [path]
            stem = path.name.removesuffix(".gguf")
        else:
            files = [path.with_name(n) for n in split_names(split[0], split[2])]
            missing = [str(f) for f in files if not f.is_file()]
            if missing:
                raise ModelNotFound(f"parts of the split set {path.name} are missing: {', '.join(missing)}")
            stem = split[0]
        name = ModelName("library", sanitize_part(stem), "latest")
        return PullPlan(name, tuple(self._part(f) for f in files), {"type": "path", "path": str(path)})

    @staticmethod
    def _part(path: Path) -> PartPlan:
        st = path.stat()

        def fetch(ctx: FetchContext) -> Staged:
            staged = ctx.layout.temp_file(ctx.key, ".copy")
            digest = hashlib.sha256()
            with open(path, "rb") as source, open(staged, "wb") as out:
                while block := source.read(_BLOCK):
                    out.write(block)
                    digest.update(block)
                    ctx.on_bytes(len(block))
            return Staged(staged, digest.hexdigest())

        # The key changes whenever the file is replaced or edited, so an edited file is read again.
        key = origin_key(str(path), str(st.st_size), str(st.st_mtime_ns), str(st.st_ino))
        return PartPlan(filename=path.name, key=key, fetch=fetch, size=st.st_size, origin={"path": str(path)})
