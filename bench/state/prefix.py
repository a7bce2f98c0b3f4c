"""Measurement 1 of bench.state, prefix_cache_ttft: time to first token (streaming) of a chat
request whose ~2,000-token system prompt an earlier request already sent, against the first (cold)
request with that system prompt, whose system prompt nobody sent before. Target: hit/cold <= 0.05."""

from __future__ import annotations

from typing import Any

import httpx

from .common import TARGETS, Sizes, Streamed, Tokenizer, fitted_text, median, stream_chat

USER_COLD = "In one word, what is the first topic above?"
USER_HIT = "In one word, what is the final topic above?"


def measure_ttft(client: httpx.Client, tok: Tokenizer, sizes: Sizes) -> dict[str, Any]:
    """Per rep: a system prompt no request sent before. The first request with it is cold;
    the second (same system prompt, another question of equal length) is the cache hit."""
    cold: list[Streamed] = []
    hit: list[Streamed] = []
    for rep in range(sizes.ttft_reps):
        system = fitted_text(tok, 1000 + rep, sizes.ttft_system_tokens)
        for user, out in ((USER_COLD, cold), (USER_HIT, hit)):
            body = {
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                "max_tokens": sizes.ttft_max_tokens,
                "temperature": 0,
            }
            out.append(stream_chat(client, body))
    cold_ms = [s.ttft_s * 1000 for s in cold]
    hit_ms = [s.ttft_s * 1000 for s in hit]
    ratio = median(hit_ms) / median(cold_ms)
    return {
        "method": "per rep: a never-sent ~N-token system prompt; request 1 (cold) then request 2 "
        "(same system prompt, a different question of the same length) = hit; TTFT = first chunk "
        "after the role chunk with content or finish_reason",
        "reps": sizes.ttft_reps,
        "system_prompt_tokens_target": sizes.ttft_system_tokens,
        "prompt_tokens": [s.prompt_tokens for s in hit],
        "cold_ttft_ms_median": median(cold_ms),
        "hit_ttft_ms_median": median(hit_ms),
        "hit_over_cold": ratio,
        "target_max": TARGETS["ttft_hit_over_cold_max"],
        "meets_target": ratio <= TARGETS["ttft_hit_over_cold_max"],
        "cold_ttft_ms": cold_ms,
        "hit_ttft_ms": hit_ms,
        "cold_cached_tokens": [s.cached_tokens for s in cold],
        "hit_cached_tokens": [s.cached_tokens for s in hit],
    }
