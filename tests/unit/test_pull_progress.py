"""Pull progress: speed and time left once bytes move, which file of a split model."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import llamay.store.pull as pull
from llamay.api.ollama.describe import progress_json


def test_speed_eta_and_file_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(pull.time, "monotonic", lambda: now[0])
    events: list[dict[str, Any]] = []
    t = pull._Tracker(events.append, total=3000, files=2)
    t.begin(SimpleNamespace(sha256="ab" * 32, key="k1"), done=0)  # type: ignore[arg-type]
    assert "speed" not in events[-1] and (events[-1]["file"], events[-1]["files"]) == (1, 2)
    now[0] += 2.0
    t.add(1000)  # 1000 bytes in 2 s
    assert events[-1]["speed"] == 500 and events[-1]["eta"] == 4.0 and events[-1]["completed"] == 1000
    t.begin(SimpleNamespace(sha256="cd" * 32, key="k2"))  # type: ignore[arg-type]
    assert events[-1]["file"] == 2 and events[-1]["digest"] == "sha256:" + "cd" * 32
    line = progress_json(events[-1])
    assert {"speed", "eta", "file", "files", "total", "completed"} <= set(line)


def test_a_single_file_pull_has_no_file_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[dict[str, Any]] = []
    t = pull._Tracker(events.append, total=10)
    t.begin(SimpleNamespace(sha256="", key="k"))  # type: ignore[arg-type]
    assert "file" not in events[-1] and "files" not in events[-1]
