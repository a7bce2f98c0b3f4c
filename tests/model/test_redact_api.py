"""POST /v1/redact through a real server: rules with exact offsets, and the model pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serverproc import ServerProc, start_server

TEXT = "Héllo 👋 Zoë, mail zoe@example.org or call +44 20 7946 0958; card 4111 1111 1111 1111 (not 4111 1111 1111 1112)."


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, home=tmp_path_factory.mktemp("home")) as s:
        yield s


def test_rules_find_valid_identifiers_with_exact_offsets(server: ServerProc) -> None:
    r = httpx.post(server.base + "/v1/redact", json={"text": TEXT}).json()
    found = {(f["type"], TEXT[f["start"] : f["end"]]) for f in r["findings"]}
    assert ("EMAIL", "zoe@example.org") in found
    assert ("CARD_NUMBER", "4111 1111 1111 1111") in found
    assert ("PHONE", "+44 20 7946 0958") in found
    assert all(f["source"] == "rules" for f in r["findings"])
    assert "4111 1111 1111 1112" in r["text"]  # the bad check digit is left alone
    assert "[EMAIL]" in r["text"] and "zoe@example.org" not in r["text"]


def test_styles_and_types(server: ServerProc) -> None:
    masked = httpx.post(
        server.base + "/v1/redact", json={"text": TEXT, "style": "mask", "types": ["EMAIL"]}
    ).json()
    assert len(masked["text"]) == len(TEXT) and [f["type"] for f in masked["findings"]] == ["EMAIL"]
    r = httpx.post(
        server.base + "/v1/redact", json={"text": "a@b.io and a@b.io", "style": "pseudonym"}
    ).json()
    assert r["text"] == "[EMAIL_1] and [EMAIL_1]"


def test_bad_requests(server: ServerProc) -> None:
    assert httpx.post(server.base + "/v1/redact", json={"text": "x", "types": ["NOPE"]}).status_code == 400
    assert httpx.post(server.base + "/v1/redact", json={"text": "x", "style": "blur"}).status_code == 400
    assert httpx.post(server.base + "/v1/redact", json={}).status_code == 400


def test_model_pass_is_marked_as_a_second_opinion(server: ServerProc) -> None:
    r = httpx.post(server.base + "/v1/redact", json={"text": TEXT, "model": ""}, timeout=120).json()
    assert "second opinion" in r["note"]
    for f in r["findings"]:
        assert f["source"] in ("rules", "model")
        assert 0 <= f["start"] < f["end"] <= len(TEXT)
    assert {f["type"] for f in r["findings"] if f["source"] == "rules"} >= {"EMAIL", "CARD_NUMBER"}
