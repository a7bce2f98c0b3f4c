"""Retrieval benchmark: index build speed, /v1/retrieve latency, retrieval quality, and
/v1/embeddings throughput against llama-cpp-python's ``Llama.embed``.

    .venv/bin/python -m bench.retrieval [--quick] [--real-vectors]

The corpus is generated: company profiles of five ~115-word paragraphs (one passage each) with
questions labelled with the passage that answers them: the product asked by company name
(``name``) or in other words without it (``paraphrase``), the founder, the revenue (``finance``).
1. the quality corpus is built with all-MiniLM (build passages/s), then recall@5 of the vector,
   keyword and hybrid rankings for its questions (in-process, as an admin);
2. a 10,000-passage index (2,000 with --quick) for latency, holding random unit vectors of
   all-MiniLM's width (search cost does not depend on their values; embedding 10,000 passages
   takes many minutes on two cores) unless --real-vectors;
3. ``llamay serve -index -embed all-minilm``: sequential /v1/retrieve latency, then 1,000
   sentences through /v1/embeddings from concurrent clients;
4. llama-cpp-python's ``Llama.embed`` over the same sentences in this process, the server
   stopped.  Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from llamay.embed import embed_texts_sync, imported_path, load_encoder
from llamay.rag import ADMIN, EncoderEmbedder, build_index, open_index
from llamay.rag.search import rrf
from llamay.testing import write_tiny_llama
from llamay.testing.server import free_port, start_server

from .common import percentile, print_json

ADJ = (
    "solar:sun-powered electric:battery-driven portable:handheld waterproof:water-resistant "
    "recycled:reclaimed wireless:cordless organic:natural lightweight:featherweight modular:snap-together "
    "industrial:factory-grade medical:clinical luxury:premium budget:low-cost smart:internet-connected "
    "handmade:artisan outdoor:open-air marine:seagoing vintage:retro compact:space-saving heated:warmed "
    "foldable:collapsible insulated:thermal biodegradable:compostable quiet:low-noise rugged:heavy-duty"
)
PRODUCT = (
    "bicycles:bikes kitchen-knives:chef-blades water-filters:water-purifiers running-shoes:jogging-sneakers "
    "office-chairs:desk-seating headphones:earphones tents:camping-shelters lamps:light-fixtures "
    "backpacks:rucksacks drones:unmanned-aircraft wristwatches:timepieces coffee-machines:espresso-makers "
    "scooters:kick-boards greenhouses:grow-houses boats:small-vessels guitars:string-instruments "
    "microscopes:magnifying-instruments ovens:stoves umbrellas:parasols helmets:head-protection "
    "sofas:couches cameras:photo-devices telescopes:star-gazing-optics fishing-rods:angling-poles"
)
FIRST = "Maria Ken Amara Lucas Priya Tomas Ingrid Kwame Mei Omar Sofia Dmitri Aisha Pedro Hana Felix Nora Ravi Lena Tariq"
LAST = "Okafor Tanaka Silva Novak Mensah Larsen Iyer Duarte Kowalski Haddad Berg Moreau Quispe Nakamura Osei Varga"
CITIES = "Lisbon Nairobi Osaka Porto Lima Oslo Accra Krakow Quito Tallinn Lyon Pune Hanoi Cusco Bergen Tunis Leeds Graz"
SYLLABLES = "vel mor tan quo zir bex lum dra kai fen osk ryn tav ulm"
FILLER = """
The team meets every Monday to review customer feedback and plan the next release.
Most orders ship within two days from a warehouse near the main rail line.
New staff spend their first month working beside experienced colleagues on real projects.
The firm publishes a short report each quarter that partners can read online.
Suppliers are chosen for reliability and are visited at least once a year.
The company keeps its offices open late during the busy season before the holidays.
Customers can return items within thirty days if they are not satisfied.
The board reviews safety records and energy use at every annual meeting.
""".strip().splitlines()


def _pairs(text: str) -> list[tuple[str, str]]:
    return [(a.replace("-", " "), b.replace("-", " ")) for a, b in (p.split(":") for p in text.split())]


@dataclass(frozen=True)
class Question:
    kind: str
    text: str
    source: str
    fact: str  # a sentence only the answering passage holds


def _paragraph(rng: random.Random, fact: str, words: int = 115) -> str:
    out = [fact]
    while len(" ".join(out).split()) < words:
        out.append(rng.choice(FILLER))
    return " ".join(out)


def make_corpus(root: Path, n_docs: int, seed: int = 0) -> list[Question]:
    """Write `n_docs` (<= 2744) company profiles under `root`; their labelled questions."""
    rng = random.Random(seed)
    products = [(a, p) for a in _pairs(ADJ) for p in _pairs(PRODUCT)]
    rng.shuffle(products)
    syl = SYLLABLES.split()
    names = rng.sample([(a + b + c).capitalize() for a in syl for b in syl for c in syl], n_docs)
    questions: list[Question] = []
    for i, name in enumerate(names):
        (adj, adj2), (prod, prod2) = products[i % len(products)]
        founder = f"{rng.choice(FIRST.split())} {rng.choice(LAST.split())}"
        city, year = rng.choice(CITIES.split()), rng.randint(1950, 2020)
        facts = [
            f"{name} was founded in {year} by {founder} in {city}.",
            f"{name} designs and sells {adj} {prod} to shops across the region.",
            f"The engineering group at {name} is run by {rng.choice(FIRST.split())} {rng.choice(LAST.split())}.",
            f"Last year {name} reported revenue of {rng.randint(2, 900)} million dollars.",
            f"{name} sponsors a chess club in {city} and donates books to local schools.",
        ]
        source = f"{i // 100:02d}/{name.lower()}.md"
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        text = f"# {name}\n\n" + "\n\n".join(_paragraph(rng, f) for f in facts) + "\n"
        (root / source).write_text(text, encoding="utf-8")
        questions += [
            Question("name", f"What kind of products does {name} sell?", source, facts[1]),
            Question("paraphrase", f"Which company makes {adj2} {prod2}?", source, facts[1]),
            Question("founder", f"Who founded {name}, and in which year?", source, facts[0]),
            Question("finance", f"How much money did {name} earn in sales last year?", source, facts[3]),
        ]
    return questions


@dataclass(frozen=True)
class RandomVectors:
    """Unit vectors seeded by each text's hash, named as the model the server will load."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        seeds = [int(hashlib.sha256(t.encode()).hexdigest()[:16], 16) for t in texts]
        out = np.array([np.random.default_rng(s).standard_normal(self.dim) for s in seeds], dtype=np.float32)
        out = out.reshape(len(texts), self.dim)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def build(root: Path, index: Path, embedder: Any, source: str) -> dict[str, Any]:
    report = build_index(root, index, embedder, model_source=source)
    n, t = report.passages, report.seconds
    return {"passages": n, "seconds": round(t, 2), "passages_per_s": round(n / t, 1)}


def quality(index_path: Path, encoder: Any, questions: list[Question]) -> dict[str, Any]:
    """recall@5 of each ranking, overall and by kind of question."""
    index = open_index(index_path)
    found: dict[str, dict[str, list[bool]]] = {m: {} for m in ("vector", "keyword", "hybrid")}
    for q in questions:
        qvec = embed_texts_sync(encoder, [q.text], True)[0][0]
        by_vector, by_keyword = index.rankings(q.text, qvec, ADMIN, 100)
        hybrid = [r for r, _ in rrf([by_vector, by_keyword])]
        for method, rows in zip(found, (by_vector, by_keyword, hybrid), strict=True):
            hits = index.hits(rows[:5], [0.0] * len(rows[:5]))
            ok = any(h.source == q.source and q.fact in h.text for h in hits)
            found[method].setdefault(q.kind, []).append(ok)
    index.close()

    def rate(xs: list[bool]) -> float:
        return round(sum(xs) / len(xs), 3)

    return {
        "questions": len(questions),
        "recall_at_5": {m: rate([x for xs in by.values() for x in xs]) for m, by in found.items()},
        "recall_at_5_by_kind": {m: {k: rate(xs) for k, xs in sorted(by.items())} for m, by in found.items()},
    }


def _ms(times: list[float], *pcts: int) -> dict[str, float]:
    return {f"p{p}_ms": round(percentile(times, p), 2) for p in pcts}


def latency(base: str, queries: list[str], n: int) -> dict[str, Any]:
    """Sequential /v1/retrieve requests (top_k 5) after 5 for warm-up."""
    times: list[float] = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for i in range(n + 5):
            t0 = time.perf_counter()
            body = {"query": queries[i % len(queries)], "top_k": 5}
            client.post("/v1/retrieve", json=body).raise_for_status()
            times += [(time.perf_counter() - t0) * 1000] if i >= 5 else []
    return {"requests": n, **_ms(times, 50, 95)}


async def http_embed_rate(base: str, texts: list[str], clients: int, per_request: int) -> float:
    """Sentences/s through /v1/embeddings, `per_request` a request, `clients` at a time."""
    gate = asyncio.Semaphore(clients)
    async with httpx.AsyncClient(base_url=base, timeout=300) as client:

        async def post(batch: list[str]) -> None:
            async with gate:
                r = await client.post("/v1/embeddings", json={"model": "all-minilm", "input": batch})
                assert len(r.raise_for_status().json()["data"]) == len(batch)

        await post(texts[:8])  # warm-up
        t0 = time.perf_counter()
        await asyncio.gather(*(post(texts[i : i + per_request]) for i in range(0, len(texts), per_request)))
        return len(texts) / (time.perf_counter() - t0)


def llama_cpp_embed(gguf: Path, sentences: list[str], threads: int) -> float:
    from llama_cpp import Llama

    llm = Llama(
        model_path=str(gguf), embedding=True, n_ctx=512, n_batch=512, n_threads=threads, verbose=False
    )
    llm.embed(sentences[:8])  # warm-up
    t0 = time.perf_counter()
    out = llm.embed(sentences)
    rate = len(sentences) / (time.perf_counter() - t0)
    assert len(out) == len(sentences)
    llm.close()
    return rate


def sentences(n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [
        f"{rng.choice(FIRST.split())} of {rng.choice(CITIES.split())}: {rng.choice(FILLER)}" for _ in range(n)
    ]


def search_only(index_path: Path, encoder: Any, queries: list[str], n: int) -> dict[str, float]:
    """In-process `Index.search` time (queries embedded beforehand), to set against latency."""
    index = open_index(index_path)
    qvecs = embed_texts_sync(encoder, queries[:n], True)[0]
    times = []
    for q, v in zip(queries[:n], qvecs, strict=True):
        t0 = time.perf_counter()
        index.search(q, v, ADMIN, limit=5, depth=100)
        times.append((time.perf_counter() - t0) * 1000)
    index.close()
    return {f"search_only_{k}": v for k, v in _ms(times, 50).items()}


def offline(work: Path, args: argparse.Namespace, threads: int, out: dict[str, Any]) -> list[str]:
    """Steps 1 and 2; returns the latency queries."""
    questions = make_corpus(work / "quality", 24 if args.quick else 120)
    big = make_corpus(work / "latency", 400 if args.quick else 2000, seed=7)
    queries = [q.text for q in random.Random(3).sample(big, min(len(big), 500))]
    encoder = load_encoder("all-minilm", "embed", threads=threads)
    try:
        real = EncoderEmbedder(encoder)
        out["build"] = build(work / "quality", work / "q.sqlite", real, "all-minilm") | {
            "model": encoder.name
        }
        print(f"quality index: {out['build']}", file=sys.stderr)
        out["quality"] = quality(work / "q.sqlite", encoder, questions) | {
            "passages": out["build"]["passages"]
        }
        print(f"quality: {out['quality']['recall_at_5']}", file=sys.stderr)
        fast = RandomVectors(encoder.name, encoder.dim)
        built = build(work / "latency", work / "l.sqlite", real if args.real_vectors else fast, "all-minilm")
        vectors = "all-minilm" if args.real_vectors else "random unit vectors (search cost only)"
        out["latency_index"] = built | {"vectors": vectors}
        out["retrieve"] = search_only(work / "l.sqlite", encoder, queries, 100)
    finally:
        encoder.close()
    return queries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.retrieval", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--real-vectors", action="store_true", help="embed the latency index with all-MiniLM too")
    args = ap.parse_args(argv)
    n_requests, n_sentences = (30, 200) if args.quick else (200, 1000)
    clients, per_request, threads = 8, 10, len(os.sched_getaffinity(0))
    texts = sentences(n_sentences)
    out: dict[str, Any] = {"machine": {"cpus": threads, "loadavg_start": list(os.getloadavg())}}
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as tmp:
        work = Path(tmp)
        queries = offline(work, args, threads, out)
        port = free_port()
        cmd = [sys.executable, "-m", "llamay", "serve", "-m", str(write_tiny_llama(work / "chat.gguf"))]
        cmd += ["-addr", f"127.0.0.1:{port}", "-index", str(work / "l.sqlite"), "-embed", "all-minilm"]
        with start_server(
            "llamay", [*cmd, "-threads", str(threads)], port, "/health", timeout=300
        ) as server:
            out["retrieve"] |= {"index_passages": out["latency_index"]["passages"]}
            out["retrieve"] |= latency(server.base_url, queries, n_requests)
            print(f"retrieve: {out['retrieve']}", file=sys.stderr)
            llamay_rate = asyncio.run(http_embed_rate(server.base_url, texts, clients, per_request))
        baseline = llama_cpp_embed(imported_path("all-minilm"), texts, threads)
    rates = {"llamay_http_per_s": round(llamay_rate, 1), "llama_cpp_python_embed_per_s": round(baseline, 1)}
    out["embeddings"] = {"sentences": n_sentences, "clients": clients, "sentences_per_request": per_request}
    out["embeddings"] |= rates | {"ratio": round(llamay_rate / baseline, 3), "target_ratio": 1.0}
    out["machine"]["loadavg_end"] = list(os.getloadavg())
    print_json(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
