"""bench.quants' bookkeeping: the interleaved run order, each figure's best over runs, the
comparison against the anchor and the decode limit, and the bytes a decoded token reads."""

from __future__ import annotations

import math
from pathlib import Path

import gguf
import numpy as np
import pytest

from bench.common import cpu_info
from bench.quants.main import DEFAULT_TARGETS, NOSPEC, best, compare, run_order
from bench.quants.models import bytes_per_token
from bench.quants.paired import summarise


def test_runs_alternate_starting_with_the_anchor() -> None:
    assert run_order(3, 1) == ["llama_server", "llamay", "llama_server", "llama_server"]
    assert run_order(2, 2) == ["llama_server", "llamay", "llama_server", "llamay"]
    assert run_order(1, 3) == ["llama_server", "llamay", "llamay", "llamay"]
    assert run_order(2, 1, 2) == ["llama_server", "llamay", NOSPEC, "llama_server", NOSPEC]


def test_best_takes_the_fastest_run_of_each_figure_and_skips_failed_ones() -> None:
    runs = [
        {"decode": {"tok_s": 10.0}, "prefill": {"tok_s": 90.0}, "prompt_heavy_500_c8": {"wall_s": 30.0}},
        {"decode": {"tok_s": 14.0}, "prefill": {"tok_s": 80.0}, "prompt_heavy_500_c8": {"wall_s": 20.0}},
        {"error": {"what": "server did not start"}},
    ]
    assert best(runs) == {"decode_tok_s": 14.0, "prefill_tok_s": 90.0, "prompt_heavy_500_c8_wall_s": 20.0}
    assert all(math.isnan(v) for v in best([{"error": {}}]).values())


def test_compare_puts_llamay_ahead_above_one() -> None:
    mine = {"decode_tok_s": 20.0, "prefill_tok_s": 120.0, "prompt_heavy_500_c8_wall_s": 10.0}
    anchor = {"decode_tok_s": 16.0, "prefill_tok_s": 120.0, "prompt_heavy_500_c8_wall_s": 15.0}
    got = compare(mine, anchor, limit=40.0)
    assert got["decode_ratio"] == {"value": 1.25, "target": 1.0, "met": True}
    assert got["decode_of_limit"]["value"] == 0.5 and got["decode_of_limit"]["met"] is False
    assert got["prefill_ratio"]["met"] is False  # level is short of 1.2
    assert got["prompt_heavy_c8_ratio"]["value"] == 1.5
    failed = compare({**mine, "decode_tok_s": math.nan}, anchor, limit=40.0)
    assert failed["decode_ratio"]["met"] is None
    assert got["decode_nospec_ratio"]["met"] is None  # no runs without speculation


def test_decode_without_speculation_is_judged_on_the_decode_targets() -> None:
    mine = {"decode_tok_s": 30.0, "prefill_tok_s": 120.0, "prompt_heavy_500_c8_wall_s": 10.0}
    anchor = {"decode_tok_s": 20.0, "prefill_tok_s": 100.0, "prompt_heavy_500_c8_wall_s": 15.0}
    nospec = {"decode_tok_s": 19.0, "prefill_tok_s": math.nan, "prompt_heavy_500_c8_wall_s": math.nan}
    got = compare(mine, anchor, limit=40.0, nospec=nospec)
    assert got["decode_ratio"]["met"] is True
    assert got["decode_nospec_ratio"] == {"value": 0.95, "target": 1.0, "met": False}
    assert got["decode_nospec_of_limit"]["value"] == 19.0 / 40.0


def test_the_default_model_is_judged_on_its_own_targets_and_reports_the_rest() -> None:
    mine = {"decode_tok_s": 21.0, "prefill_tok_s": 100.0, "prompt_heavy_500_c8_wall_s": 10.0}
    anchor = {"decode_tok_s": 20.0, "prefill_tok_s": 120.0, "prompt_heavy_500_c8_wall_s": 12.5}
    got = compare(mine, anchor, limit=40.0, targets=DEFAULT_TARGETS)
    assert got["decode_ratio"]["target"] == 1.1 and got["decode_ratio"]["met"] is False  # 1.05
    assert got["prompt_heavy_c8_ratio"] == {"value": 1.25, "target": 1.2, "met": True}
    assert got["prefill_ratio"] == {"value": 100.0 / 120.0, "target": None, "met": None}


def _write(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    w = gguf.GGUFWriter(path, "llama")
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_token_reads_every_matrix_and_the_output_but_not_the_embedding_rows(tmp_path: Path) -> None:
    layer = {
        "blk.0.attn_q.weight": np.zeros((8, 32), np.float16),
        "blk.0.attn_norm.weight": np.ones(32, np.float32),
    }
    embd = {"token_embd.weight": np.zeros((100, 32), np.float16)}
    tied = _write(tmp_path / "tied.gguf", {**embd, **layer})
    assert bytes_per_token(tied) == 8 * 32 * 2 + 32 * 4 + 100 * 32 * 2  # the embedding is the output
    output = {"output.weight": np.zeros((100, 32), np.float32)}
    untied = _write(tmp_path / "untied.gguf", {**embd, **layer, **output})
    assert bytes_per_token(untied) == 8 * 32 * 2 + 32 * 4 + 100 * 32 * 4


def test_cpu_info_reads_the_first_processors_model_and_simd_extensions(tmp_path: Path) -> None:
    block = "processor\t: {n}\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma f16c avx512f avx512_vnni{extra}\n\n"
    path = tmp_path / "cpuinfo"
    path.write_text(block.format(n=0, extra="") + block.format(n=1, extra=" avx_vnni"))
    assert cpu_info(str(path)) == {"model": "AMD EPYC", "simd": ["avx2", "fma", "f16c", "avx512f", "avx512_vnni"]}
    assert cpu_info(str(tmp_path / "missing")) == {}


def test_paired_decode_takes_each_pairs_ratio_and_counts_the_pairs_llamay_won() -> None:
    got = summarise([30.0, 20.0, 33.0], [25.0, 25.0, 30.0])
    assert got["ratios"] == pytest.approx([1.2, 0.8, 1.1])
    assert got["median_ratio"] == pytest.approx(1.1)
    assert got["llamay_won"] == 2 and got["pairs"] == 3
