"""API keys and principals.

Keys come from `LLAMAY_API_KEY` (one admin key) and/or a keys file:
`{"keys": [{"key": "...", "principal": "ops", "groups": ["finance"], "role": "user" | "admin"}]}`.
With no keys the server is single-user: every request acts as the local admin.
Keys are compared in constant time and never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import Forbidden, Unauthorized

__all__ = ["Principal", "KeyRing", "LOCAL", "bearer_token"]


@dataclass(frozen=True)
class Principal:
    name: str
    groups: tuple[str, ...] = ()
    role: str = "user"

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    def owner_tag(self, single_user: bool) -> str | None:
        """What a resource created by this principal records as its owner."""
        return None if single_user else self.name

    def check_owner(self, owner: str | None, what: str) -> None:
        """403 unless this principal owns the resource (or is an admin)."""
        if self.admin or owner is None or owner == self.name:
            return
        raise Forbidden(f"{what} belongs to another principal")


LOCAL = Principal("local", (), "admin")


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
            entries.append((admin_key, Principal("admin", (), "admin")))
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
        out = []
        for item in data["keys"]:
            role = item.get("role", "user")
            if role not in ("user", "admin"):
                raise ValueError(f"role must be 'user' or 'admin', not {role!r}")
            groups = tuple(str(g) for g in item.get("groups", []))
            out.append((str(item["key"]), Principal(str(item["principal"]), groups, role)))
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
