"""A short soak (bench/soak.py) on the tiny generated model: mixed traffic from concurrent
clients for about 75 seconds against a real `llamay serve`, then the server must be alive,
every answer right, and its memory flat. A functional leak check, not a timing claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.soak import MIX, run_soak
from llamay.testing import write_tiny_llama

pytestmark = pytest.mark.slow

MINUTES = 1.25
RSS_GROWTH_MB = 150  # generous: allocator slack, caches filling; a leak per request grows past it


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    model: Path = write_tiny_llama(tmp_path_factory.mktemp("soak") / "tiny-llama.gguf")
    return run_soak(MINUTES, str(model), clients=6, ctx=2048, warmup=20.0)


def test_every_kind_of_request_ran(report: dict[str, Any]) -> None:
    assert set(report["requests"]) == set(MIX)
    assert report["total_requests"] > 100


def test_no_server_errors_and_no_hangs(report: dict[str, Any]) -> None:
    assert report["server_errors_5xx"] == 0, report["server_error_samples"]
    assert report["client_timeouts"] == 0


def test_every_answer_is_right(report: dict[str, Any]) -> None:
    assert report["bad_answers"] == 0, report["bad_answer_samples"]
    greedy = report["greedy"]
    assert greedy["checked"] > 5 and greedy["mismatched"] == 0, greedy
    assert "413" in report["requests"]["oversized"]


def test_server_alive_and_idle_at_the_end(report: dict[str, Any]) -> None:
    assert report["server_alive"] and report["health_after"] == 200
    for model in report["engine_at_end"]:  # dropped streams were aborted, not left generating
        assert model["running"] == 0 and model["waiting"] == 0 and model["kv_cells"] == 0, model


def test_memory_stays_flat(report: dict[str, Any]) -> None:
    """The process apart from the prefix cache's RAM tier (bounded by -cache-ram, reported
    by /health) stays flat; the tier itself never exceeds its capacity."""
    net = report["rss_without_ram_cache_mb"]
    assert net["end"] < net["after_warmup"] + RSS_GROWTH_MB, (net, report["rss_mb"])
    for model in report["engine_at_end"]:
        assert model["ram_cache"]["bytes"] <= model["ram_cache"]["capacity"], model
