"""bench.structured, part 1b: the decode ratio from the engine's own timings.

The same three arms as part 1 (bench.structured.decode), generated in this process by
the engine `llamay serve` runs (`load_model` with the server's default RuntimeConfig),
without HTTP: the prompt rendered by the model's chat template, the schema compiled as
the routes compile it by default, greedy, the same max_tokens (the unconstrained arm kept
from stopping by the engine's ignore_eos rather than a logit_bias). Each request's time
per token is the engine's own `generate_ms` (first token to finish) over the tokens after
the first, and the times between its tokens are stamped as the engine publishes them;
the mask's share comes from the finish event. No client process or HTTP event loop
competes with the engine for the cores.
"""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

from .common import (
    FACT_SCHEMA,
    PROMPT,
    Issues,
    Sizes,
    TokenTiming,
    arm_order,
    load_average,
    summarize_timings,
)
from .decode import ARMS, WARMUP_TOKENS


def run_engine_decode(path: Path, sizes: Sizes, issues: Issues) -> dict[str, Any]:
    from llamay.api.jsonformat import JsonStyle, schema_grammar
    from llamay.engine.repetition import RepetitionParams
    from llamay.engine.request import ConstraintPlan, GenerateRequest
    from llamay.runtime import RuntimeConfig, load_model
    from llamay.types import ErrorEvent, FinishEvent, SamplingParams, StopSpec, TokenEvent

    loaded = load_model(path.name, path, RuntimeConfig())
    try:
        template, model = loaded.template, loaded.model
        text = template.render([{"role": "user", "content": PROMPT}], add_generation_prompt=True)
        tokens = model.tokenize(template.strip_bos_eos(text, add_bos=model.add_bos), parse_special=True)
        # As the routes compile a response_format schema by default.
        schema = schema_grammar(FACT_SCHEMA, JsonStyle(), strict=True, param="response_format")
        plan = ConstraintPlan(schema, label="json")
        _ = model.compile_cache  # the llguidance tokenizer, built outside the timed requests

        greedy = SamplingParams(temperature=0.0).validate()

        def request(arm: str, max_tokens: int) -> GenerateRequest:
            if arm == "unconstrained":
                # Kept going past an end of generation by the engine itself: the HTTP arm's
                # logit_bias ban would cost the sampler a vocabulary-wide copy per token,
                # a handicap the constrained arms do not carry.
                stop = StopSpec(max_tokens=max_tokens, ignore_eos=True)
                return GenerateRequest(list(tokens), greedy, stop)
            off = RepetitionParams(enabled=False) if arm == "constrained_no_ngram" else None
            stop = StopSpec(max_tokens=max_tokens)
            return GenerateRequest(list(tokens), greedy, stop, plan, repetition=off)

        outputs: dict[tuple[str, int], list[int]] = {}

        def generate(arm: str, max_tokens: int) -> TokenTiming | None:
            events: queue.SimpleQueue[tuple[float, Any]] = queue.SimpleQueue()
            # Stamped in the engine's thread as it publishes each token: a reader that
            # falls behind and then drains several at once cannot merge their gaps.
            handle = loaded.engine.submit(
                request(arm, max_tokens), lambda ev: events.put((time.perf_counter(), ev))
            )
            stamps: list[float] = []
            made: list[int] = []
            try:
                while True:
                    stamp, ev = events.get()
                    if isinstance(ev, TokenEvent):
                        stamps.append(stamp)
                        made.append(ev.token)
                    elif isinstance(ev, ErrorEvent):
                        issues.add(f"engine_decode.{arm}", f"{type(ev.error).__name__}: {ev.error}")
                        return None
                    elif isinstance(ev, FinishEvent):
                        break
            finally:
                handle.abort()
            x, n = ev.extra, ev.usage.completion_tokens
            closed = ev.reason == "stop" and bool(x.get("closed_early"))  # ran to the room's end
            if n != max_tokens or not (ev.reason == "length" or closed):
                issues.add(f"engine_decode.{arm}", f"{n} tokens, finish {ev.reason!r}: {ev.message}")
            # The token floor compares position i across repetitions that made the same
            # tokens; greedy output that depends on the request before it is a finding.
            first = outputs.setdefault((arm, max_tokens), made)
            if made != first:
                at = next(
                    (i for i, (a, b) in enumerate(zip(first, made, strict=False)) if a != b), len(first)
                )
                issues.add(
                    f"engine_decode.{arm}", f"a greedy repetition made other tokens from token {at} on"
                )
            gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
            seconds, mask = float(x["generate_ms"]) / 1000.0, float(x["mask_ms"]) / 1000.0
            return TokenTiming(
                arm, n, seconds, gaps, int(x["mask_steps"]), mask, stamped=True, made=tuple(made)
            )

        for arm in ARMS:  # warm-up: compiles the grammar, caches the prompt's prefix
            generate(arm, WARMUP_TOKENS)
        reps: list[dict[str, TokenTiming]] = []
        load_before = load_average()
        for rep in range(sizes.decode_reps):
            timed = {arm: generate(arm, sizes.max_tokens) for arm in arm_order(rep)}
            reps.append({arm: t for arm, t in timed.items() if t is not None})
        load = [load_before, load_average()]
    finally:
        loaded.close()
    return {**summarize_timings(reps), "load_avg_1min": load}
