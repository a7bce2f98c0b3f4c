"""`build_server(config)` makes the app's state whole at once: one typed object, every field
set before the first request, nothing added or replaced by the requests that once did."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from llamay.api.state import ServerState, state_of
from llamay.config import RuntimeConfig, ServerConfig, ServerLimits
from llamay.server import build_server


def test_the_state_has_every_field_at_build_time(tiny_model_path: Path, tmp_path: Path) -> None:
    config = ServerConfig(
        model=str(tiny_model_path),
        runtime=RuntimeConfig(ctx=512, threads=1, concurrency=2, home=tmp_path),
        limits=ServerLimits(body_timeout=30.0),
    )
    app = build_server(config)
    state = state_of(app)
    assert type(app.state) is ServerState
    for f in dataclasses.fields(ServerState):  # slotted: an unset field raises here
        assert getattr(state, f.name) is not None or f.name == "index", f.name  # no -index given
    assert state.limits == config.limits and state.runtime.config == config.runtime
    assert state.runtime.encoders is state.encoders and state.runtime.store is not None
    assert (tmp_path / "snapshot.key").is_file()  # made with the state, not by the first snapshot
    with pytest.raises(AttributeError):
        app.state.made_later = 1  # a field the state does not have cannot be added

    before = {f.name: getattr(state, f.name) for f in dataclasses.fields(ServerState)}
    with TestClient(app) as client:  # the lifespan closes the runtime at the end
        # Each of these once added something to app.state on first use.
        assert client.get("/api/tags").status_code == 200
        assert client.post("/v1/responses", json={"input": "hi", "max_output_tokens": 2}).status_code == 200
        cid = client.post("/v1/contexts", json={"prompt": "hello there"}).json()["id"]
        snapshot = client.get(f"/v1/contexts/{cid}/snapshot")
        assert snapshot.status_code == 200
        restored = client.post("/v1/contexts/restore", content=snapshot.content)
        assert restored.status_code == 200 and restored.json()["signed"] is True
        assert client.get("/v1/stats").json()["requests"]  # the counter the middleware feeds
        assert len(state.responses) == 1  # the store that was there from the start
    assert state_of(app) is state
    assert all(getattr(state, name) is value for name, value in before.items())
