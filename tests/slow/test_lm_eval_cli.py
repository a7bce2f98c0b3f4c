"""The real `lm_eval` CLI (lm-evaluation-harness) against llamay, offline: `local-completions`
with its remote tokenizer (llamay's /tokenizer_info, /tokenize, /detokenize) on a local
YAML task over a local JSONL file, a log-likelihood task and a generate-until task. No
Hugging Face hub access (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE). Each figure lm-eval records
is checked against the server's own answer to the same question: the log-likelihood of
the continuation tokens from a prompt-scoring completion, and the greedy text."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llamay.testing import write_tiny_llama
from tests.serverproc import ServerProc, start_server

pytestmark = pytest.mark.slow

ITEMS = [
    {"context": "The capital of France is", "choices": [" Paris", " Banana"], "answer": 0},
    {"context": "One, two, three,", "choices": [" four", " cat"], "answer": 0},
    {"context": "Hello", "choices": [" world", " there", " again"], "answer": 1},
]
MAX_GEN = 8
SEED = 1234  # lm-eval's default seed, sent with every request

LL_TASK = """task: llamay_ll
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
target_delimiter: ""
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""
GEN_TASK = """task: llamay_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{choices[answer]}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: {max_gen}
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""


def _lm_eval() -> str:
    found = Path(sys.executable).with_name("lm_eval")
    if not found.exists():
        pytest.fail("lm_eval is not installed: it is in the test extra (pip install -e '.[test]')")
    return str(found)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    home = tmp_path_factory.mktemp("lm-eval")
    model = write_tiny_llama(home / "tiny.gguf")
    with start_server(model, "-ctx", "2048", home=home / "h") as s:
        yield s


@pytest.fixture(scope="module")
def samples(server: ServerProc, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    work = tmp_path_factory.mktemp("lm-eval-run")
    data = work / "items.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    tasks = work / "tasks"
    tasks.mkdir()
    (tasks / "llamay_ll.yaml").write_text(LL_TASK.format(data=data))
    (tasks / "llamay_gen.yaml").write_text(GEN_TASK.format(data=data, max_gen=MAX_GEN))
    out = work / "out"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(work / "hf"),  # an empty cache: nothing fetched earlier helps
    }
    args = f"model=tiny,base_url={server.base}/v1/completions,tokenizer_backend=remote,num_concurrent=1,max_retries=1"
    cmd = [_lm_eval(), "--model", "local-completions", "--model_args", args, "--tasks", "llamay_ll,llamay_gen",
           "--include_path", str(tasks), "--output_path", str(out), "--log_samples"]  # fmt: skip
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stderr[-4000:]
    got: dict[str, list[dict[str, Any]]] = {}
    for task in ("llamay_ll", "llamay_gen"):
        files = sorted(out.rglob(f"samples_{task}_*.jsonl"))
        assert files, f"lm_eval wrote no samples for {task}: {run.stdout[-2000:]}"
        got[task] = [json.loads(line) for line in files[-1].read_text().splitlines()]
    shutil.rmtree(work / "hf", ignore_errors=True)
    return got


def _tokens(server: ServerProc, text: str) -> list[int]:
    r = httpx.post(server.base + "/tokenize", json={"content": text, "add_special": False}, timeout=60)
    r.raise_for_status()
    tokens: list[int] = r.json()["tokens"]
    return tokens


def _loglikelihood(server: ServerProc, context: str, continuation: str) -> float:
    ctx, cont = _tokens(server, context), _tokens(server, continuation)
    body = {
        "prompt": ctx + cont,
        "max_tokens": 1,
        "echo": True,
        "logprobs": 1,
        "temperature": 0,
        "seed": SEED,
    }
    r = httpx.post(server.base + "/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    scored = r.json()["choices"][0]["logprobs"]["token_logprobs"]
    return float(sum(scored[len(ctx) : len(ctx) + len(cont)]))


def test_loglikelihoods_are_the_servers_own(
    server: ServerProc, samples: dict[str, list[dict[str, Any]]]
) -> None:
    rows = samples["llamay_ll"]
    assert sorted(r["doc_id"] for r in rows) == list(range(len(ITEMS)))
    for row in rows:
        item = ITEMS[row["doc_id"]]
        recorded = [float(r[0]) for r in row["filtered_resps"]]
        assert len(recorded) == len(item["choices"])
        for choice, value in zip(item["choices"], recorded, strict=True):
            assert math.isfinite(value) and value < 0
            assert value == pytest.approx(_loglikelihood(server, item["context"], choice), abs=1e-3)
        best = max(range(len(recorded)), key=recorded.__getitem__)
        assert row["acc"] == float(best == item["answer"])


def test_generations_are_the_servers_greedy_text(
    server: ServerProc, samples: dict[str, list[dict[str, Any]]]
) -> None:
    rows = samples["llamay_gen"]
    assert sorted(r["doc_id"] for r in rows) == list(range(len(ITEMS)))
    for row in rows:
        item = ITEMS[row["doc_id"]]
        body = {
            "prompt": item["context"],
            "max_tokens": MAX_GEN,
            "temperature": 0,
            "seed": SEED,
            "stop": ["\n"],
        }
        r = httpx.post(server.base + "/v1/completions", json=body, timeout=120)
        r.raise_for_status()
        assert row["filtered_resps"][0] == r.json()["choices"][0]["text"]
