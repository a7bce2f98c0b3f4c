"""API keys and principals.

Keys come from `LLAMAY_API_KEY` (one admin key) and/or a keys file:
`{"keys": [{"key": "...", "principal": "ops", "groups": ["finance"], "role": "user" | "admin",
"cache_group": "team-a", "weight": 2, "limits": {...}}], "limits": {...}}`. With no keys the
server is single-user: every request acts as the local admin.

`weight` (a positive number, default 1) is the principal's share of the engine when several
principals' requests wait: the engine charges each principal for the tokens it is served,
divided by its weight, and starts the least charged one's next sequence (engine/scheduler.py).
Give every key of one principal the same weight.

`limits` (see `Limits`) at the top are the defaults of every user key; a key's own `limits`
override them. Admin keys have none unless their entry sets some.
Keys are compared in constant time and never logged.

Each principal has a prefix-cache namespace: its own (`u:<principal>`), or `g:<cache_group>`
for keys that deliberately share cached prompts; the single user's is "". The namespace of
the request being served is in `CURRENT_NAMESPACE`, and its principal in `CURRENT_PRINCIPAL`
(both set by the HTTP edge), which the chat pipeline passes to the engine.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import Forbidden, Unauthorized

__all__ = [
    "Principal",
    "KeyRing",
    "Limits",
    "LOCAL",
    "ANONYMOUS",
    "CURRENT_NAMESPACE",
    "CURRENT_PRINCIPAL",
    "bearer_token",
]

# The prefix-cache namespace of the request being served ("" single user: one namespace).
CURRENT_NAMESPACE: ContextVar[str] = ContextVar("llamay_namespace", default="")


@dataclass(frozen=True)
class Limits:
    """What one principal may hold at once: server-held contexts (forks included), bytes of
    KV they keep (resident or spilled to disk; forks share their parent's), and requests in
    flight. Past one, a request is refused with 429 and Retry-After. Also how many forks
    one call may make."""

    contexts: int = 1000
    context_bytes: int = 8 * 1024**3
    concurrent_requests: int = 32
    forks_per_call: int = 64  # beyond it a fork call is a 400 (no retry would help)

    @classmethod
    def parse(cls, value: object, base: Limits) -> Limits:
        if not isinstance(value, dict):
            raise ValueError(f"'limits' must be an object, not {value!r}")
        out = {}
        for key, given in value.items():
            if key not in cls.__dataclass_fields__:
                raise ValueError(f"unknown limit {key!r} (known: {', '.join(cls.__dataclass_fields__)})")
            if isinstance(given, bool) or not isinstance(given, int) or given < 0:
                raise ValueError(f"limit {key!r} must be a non-negative integer, not {given!r}")
            out[key] = given
        return replace(base, **out)


@dataclass(frozen=True)
class Principal:
    name: str
    groups: tuple[str, ...] = ()
    role: str = "user"
    namespace: str = ""  # its prefix-cache namespace (see the module docstring)
    limits: Limits | None = None  # None: unlimited (the single user, admins by default)
    weight: float = 1.0  # its share of the engine against other principals

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    @property
    def tenant(self) -> str:
        """Whom the engine's fair share charges for this principal's requests: its name, or
        "" for the single user (namespace ""), whose queue is the whole server's."""
        return self.name if self.namespace else ""

    def owner_tag(self, single_user: bool) -> str | None:
        """What a resource created by this principal records as its owner."""
        return None if single_user else self.name

    def check_owner(self, owner: str | None, what: str) -> None:
        """403 unless this principal owns the resource (or is an admin). A resource with
        no owner was made by the single user before keys were set up: the admins'."""
        if self.admin or owner == self.name:
            return
        raise Forbidden(f"{what} belongs to another principal")


LOCAL = Principal("local", (), "admin")
# Who calls an open path (/health) while keys are on: nobody in particular, never an admin.
ANONYMOUS = Principal("anonymous", (), "user", "anon")
# The principal of the request being served; outside a server, the single user.
CURRENT_PRINCIPAL: ContextVar[Principal] = ContextVar("llamay_principal", default=LOCAL)


class KeyRing:
    def __init__(self, entries: list[tuple[str, Principal]]) -> None:
        # Only digests are kept: equal-length comparisons, and no key text in memory dumps.
        self._entries = [(hashlib.sha256(k.encode()).digest(), p) for k, p in entries]

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    @classmethod
    def load(cls, keys_file: Path | None = None, env: dict[str, str] | None = None) -> KeyRing:
        env = dict(os.environ) if env is None else env
        entries: list[tuple[str, Principal]] = []
        admin_key = env.get("LLAMAY_API_KEY", "")
        if admin_key:
            entries.append((admin_key, Principal("admin", (), "admin", "u:admin")))
        if keys_file is not None:
            entries.extend(_read_keys(keys_file))
        return cls(entries)

    def authenticate(self, token: str | None) -> Principal:
        """The principal for a bearer token; Unauthorized (401) if none matches."""
        if not self.enabled:
            return LOCAL
        if not token:
            raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
        digest = hashlib.sha256(token.encode()).digest()
        found: Principal | None = None
        for known, principal in self._entries:  # no early exit: timing does not reveal which key
            if hmac.compare_digest(known, digest):
                found = principal
        if found is None:
            raise Unauthorized("the API key is not valid")
        return found


def _read_keys(path: Path) -> list[tuple[str, Principal]]:
    try:
        data = json.loads(path.read_text())
        defaults = Limits.parse(data.get("limits", {}), Limits())
        out = []
        for item in data["keys"]:
            role = item.get("role", "user")
            if role not in ("user", "admin"):
                raise ValueError(f"role must be 'user' or 'admin', not {role!r}")
            groups = item.get("groups", [])
            if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
                # "groups": "finance" would otherwise become seven one-letter groups.
                raise ValueError(f"'groups' must be a list of names, like [\"finance\"], not {groups!r}")
            name = item["principal"]
            if not isinstance(name, str) or not name:
                raise ValueError(f"'principal' must be a non-empty string, not {name!r}")
            group = item.get("cache_group")
            if group is not None and (not isinstance(group, str) or not group):
                raise ValueError(f"'cache_group' must be a non-empty string, not {group!r}")
            namespace = f"g:{group}" if group else f"u:{name}"
            weight = item.get("weight", 1)
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight < math.inf:
                raise ValueError(f"'weight' must be a positive number, not {weight!r}")
            limits: Limits | None = None
            if "limits" in item:
                limits = Limits.parse(item["limits"], defaults if role == "user" else Limits())
            elif role == "user":
                limits = defaults
            principal = Principal(name, tuple(groups), role, namespace, limits, float(weight))
            out.append((str(item["key"]), principal))
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot read keys file {path}: {exc}") from None


def bearer_token(authorization: str | None, x_api_key: str | None) -> str | None:
    """The key from `Authorization: Bearer <key>` or `x-api-key: <key>`."""
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return x_api_key or None
