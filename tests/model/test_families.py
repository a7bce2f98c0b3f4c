"""The family matrix: every model family people run (llamay.testing.families: a tiny
random-weight model with the family's real chat template and tokenizer) served by a real
`llamay serve` process, every check (tests/model/family_cells.py) through the OpenAI,
Anthropic and Ollama routes. One server per family; its checks are sent together (the
engine batches them; its output does not depend on what shares a batch), the server is
stopped, and each check is then its own test, failing with what it got back. Ollama's API
has no `tool_choice`, so its column has no required / named / parallel checks."""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llamay.testing.families import FAMILIES, write_family
from tests.model.family_cells import BUDGET, CHECKS, Server
from tests.serverproc import start_server

CELLS = [(route, check) for route, checks in CHECKS.items() for check in checks]


@pytest.fixture(scope="module", params=list(FAMILIES))
def outcomes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Each cell's failure (a traceback) or "" when it passed, for one family."""
    family = FAMILIES[request.param]
    folder = tmp_path_factory.mktemp(f"family-{family.name}")
    model = write_family(family, folder / f"{family.name}.gguf")
    args = ("-ctx", "8192", "-concurrency", "8", "-reasoning-budget", str(BUDGET))
    with start_server(model, *args, home=folder / "home") as proc:
        server = Server(proc.base, family)

        def run(cell: tuple[str, str]) -> str:
            route, check = cell
            try:
                CHECKS[route][check](server)
            except Exception:
                return traceback.format_exc(limit=4)
            return ""

        with ThreadPoolExecutor(8) as pool:
            results = dict(zip([f"{r}/{c}" for r, c in CELLS], pool.map(run, CELLS), strict=True))
        assert proc.alive(), f"the server died:\n{proc.log()[-3000:]}"
    yield results


@pytest.mark.parametrize(("route", "check"), CELLS, ids=[f"{r}-{c}" for r, c in CELLS])
def test_family(outcomes: dict[str, str], route: str, check: str) -> None:
    failure = outcomes[f"{route}/{check}"]
    assert not failure, failure


def test_docs_list_every_family() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "models.md").read_text()
    assert not [n for n in FAMILIES if f"| `{n}` |" not in docs]
