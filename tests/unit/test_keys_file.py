"""The keys file: principals, groups, cache namespaces and limits, refused when malformed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamay.auth import KeyRing, Limits


def load(tmp_path: Path, doc: object) -> KeyRing:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(doc))
    return KeyRing.load(path, env={})


def test_namespaces_and_limits(tmp_path: Path) -> None:
    ring = load(tmp_path, {
        "limits": {"contexts": 5},
        "keys": [
            {"key": "a", "principal": "ann", "groups": ["finance"]},
            {"key": "b", "principal": "bob", "cache_group": "team", "limits": {"concurrent_requests": 2}},
            {"key": "r", "principal": "root", "role": "admin"},
        ],
    })  # fmt: skip
    ann, bob, root = (ring.authenticate(k) for k in "abr")
    assert (ann.namespace, ann.groups, ann.limits) == ("u:ann", ("finance",), Limits(contexts=5))
    assert bob.namespace == "g:team" and bob.limits == Limits(contexts=5, concurrent_requests=2)
    assert root.limits is None and root.namespace == "u:root"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"groups": "finance"}, "must be a list of names"),
        ({"principal": ""}, "non-empty string"),
        ({"limits": {"contexts": -1}}, "non-negative integer"),
        ({"limits": {"tokens": 5}}, "unknown limit"),
        ({"cache_group": 3}, "cache_group"),
        ({"weight": 0}, "'weight' must be a positive number"),
        ({"weight": -2}, "'weight' must be a positive number"),
        ({"weight": "2"}, "'weight' must be a positive number"),
        ({"weight": True}, "'weight' must be a positive number"),
        ({"weight": float("nan")}, "'weight' must be a positive number"),
        ({"weight": float("inf")}, "'weight' must be a positive number"),
    ],
)
def test_malformed_entries_are_refused(tmp_path: Path, entry: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load(tmp_path, {"keys": [{"key": "k", "principal": "p"} | entry]})


def test_weights_and_tenants(tmp_path: Path) -> None:
    ring = load(tmp_path, {"keys": [
        {"key": "a", "principal": "ann", "weight": 2.5},
        {"key": "b", "principal": "bob", "cache_group": "team"},
    ]})  # fmt: skip
    ann, bob = ring.authenticate("a"), ring.authenticate("b")
    assert (ann.weight, bob.weight) == (2.5, 1.0)
    # the fair share charges principals, not cache groups; the single user is ""
    assert (ann.tenant, bob.tenant) == ("ann", "bob")
    assert KeyRing([]).authenticate(None).tenant == ""
