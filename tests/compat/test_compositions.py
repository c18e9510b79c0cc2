"""Compositions a serving engine's kernels use, against ``triton.autotune`` and ours.

Each scenario runs with both decorators (upstream where it runs under the interpreter) and asserts
what upstream does: heuristics on both sides of the tuner reading tuned values, calls by keyword in
another order, defaults and None, scalar key values, pruning that builds new configs, two tuners over
one ``@triton.jit`` function, and keys interleaved with different winners.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from compat_helpers import BLOCKS, Bench, both, grid


@triton.jit
def masked_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr, SCALE: tl.constexpr):
    """out = x * SCALE; EVEN (set by a heuristic that reads the tuned BLOCK) drops the mask."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * SCALE)
    else:
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * SCALE, mask=mask)


@triton.jit
def options_kernel(
    x_ptr,
    out_ptr,
    n,
    alpha,
    flag: tl.constexpr,
    D: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_B: tl.constexpr = False,
    b=None,
):
    """out = x * alpha * D (+ b when HAS_B): scalars, constexprs (``flag`` a bool one: the interpreters
    of Triton 3.6 and 3.7 cannot pass a bool as a run-time scalar), a default and an optional pointer."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    value = tl.load(x_ptr + offs, mask=mask) * alpha * D
    if HAS_B:
        value += tl.load(b + offs, mask=mask)
    tl.store(out_ptr + offs, value, mask=mask)


def _str_keys(tuner: Any) -> list[tuple[str, ...]]:
    return [tuple(map(repr, key)) for key in tuner.cache]


@pytest.mark.parametrize("autotune", both())
def test_heuristics_on_both_sides_read_tuned_values_and_feed_the_key(autotune):
    """A heuristic under the tuner reads the tuned BLOCK (and num_warps); one above sets a constexpr
    the key names: each of its values is tuned apart."""
    bench = Bench()
    below: list[tuple[Any, ...]] = []

    def even(nargs: dict[str, Any]) -> bool:
        below.append((nargs["BLOCK"], nargs["num_warps"], nargs["SCALE"]))
        return nargs["n"] % nargs["BLOCK"] == 0

    inner = triton.heuristics({"EVEN": even})(masked_scale_kernel)
    tuner = autotune(configs=bench.configs(), key=["n", "SCALE"], do_bench=bench)(inner)
    kernel = triton.heuristics({"SCALE": lambda nargs: 3 if nargs["n"] > 50 else 2})(tuner)
    for n, scale in ((64, 3), (40, 2), (64, 3)):
        x, out = torch.arange(n, dtype=torch.float32), torch.empty(n)
        kernel[grid(n)](x, out, n)
        assert torch.equal(out, x * scale)
    assert bench.timed == list(BLOCKS) * 2  # two keys tuned, the third call a hit
    assert [key[:2] for key in tuner.cache] == [(64, 3), (40, 2)]
    # every benchmark launch and the three real ones, with the config's values
    assert below[: len(BLOCKS)] == [(b, 1, 3) for b in BLOCKS]
    assert below[-1] == (32, 1, 3)
    assert len(below) == 2 * len(BLOCKS) + 3


@pytest.mark.parametrize("autotune", both())
def test_calls_by_keyword_defaults_and_none_key_as_upstream(autotune):
    """Keyword calls in another order, a defaulted key argument left out or given, None for an
    optional pointer, and float/bool key values (1 and True, 1.0 being equal keys, as upstream)."""
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["alpha", "flag", "HAS_B"], do_bench=bench)(options_kernel)
    x, out, b = torch.arange(64, dtype=torch.float32), torch.empty(64), torch.ones(64)
    tuner[grid(64)](x, out, 64, 1.5, True, 2)
    tuner[grid(64)](flag=True, D=2, alpha=1.5, n=64, out_ptr=out, x_ptr=x)  # the same key
    tuner[grid(64)](x, out, 64, 1, 1, 2)  # a new key
    tuner[grid(64)](x, out, 64, 1.0, True, 2)  # equal to the previous one (1.0 == 1 == True)
    tuner[grid(64)](x, out, 64, 1.5, True, 2, HAS_B=True, b=b)
    assert torch.equal(out, x * 3 + 1)
    tuner[grid(64)](x, out, 64, 1.5, True, 2, HAS_B=False, b=None)
    assert torch.equal(out, x * 3)
    tuner[grid(64)](x, out, 64, 1.5, True, 2, b=None)  # HAS_B left at its default: the first key
    assert _str_keys(tuner) == [
        ("1.5", "True", "'torch.float32'", "'torch.float32'"),
        ("1", "1", "'torch.float32'", "'torch.float32'"),
        ("1.5", "True", "True", "'torch.float32'", "'torch.float32'", "'torch.float32'"),
        ("1.5", "True", "False", "'torch.float32'", "'torch.float32'"),
    ]
    assert bench.timed == list(BLOCKS) * 4


@pytest.mark.parametrize("autotune", both())
def test_dtypes_of_keyword_arguments_follow_the_call_order(autotune):
    """Upstream appends the dtypes of the positional arguments, then of the keyword ones in the order
    passed: the same tensors passed by keyword in another order can be another key."""
    bench = Bench()
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(options_kernel)
    x, out = torch.arange(64, dtype=torch.float16), torch.empty(64)
    tuner[grid(64)](x, out, 64, 1.0, 0, 1)
    tuner[grid(64)](x_ptr=x, out_ptr=out, n=64, alpha=1.0, flag=0, D=1)
    tuner[grid(64)](out_ptr=out, x_ptr=x, n=64, alpha=1.0, flag=0, D=1)
    half_first, half_last = (64, "torch.float16", "torch.float32"), (64, "torch.float32", "torch.float16")
    assert list(tuner.cache) == [half_first, half_last]
    assert bench.timed == list(BLOCKS) * 2


@pytest.mark.parametrize("autotune", both())
def test_early_config_prune_building_new_configs_launches_them(autotune):
    """``early_config_prune`` may return configs of its own (other options, its own pre_hook): they
    are timed and the winner is launched with its options and its pre_hook."""
    bench = Bench()
    built: list[triton.Config] = []

    def prune(configs: list[triton.Config], nargs: dict[str, Any], **kwargs: Any) -> list[triton.Config]:
        built[:] = [
            triton.Config(dict(c.kwargs), num_warps=2, pre_hook=bench.config_hook)
            for c in configs
            if c.kwargs["BLOCK"] >= 32
        ]
        return built

    by = {"early_config_prune": prune}
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench, prune_configs_by=by)(options_kernel)
    x, out = torch.arange(40, dtype=torch.float32), torch.empty(40)
    tuner[grid(40)](x, out, 40, 1.0, 0, 1)
    assert bench.timed == [32, 64, 128] and bench.launched[-1] == 32
    assert tuner.best_config is built[0] and tuner.best_config.num_warps == 2
    assert set(tuner.configs_timings) == set(built)


@pytest.mark.parametrize("autotune", both())
def test_two_tuners_over_one_jit_function_choose_among_their_own_candidates(autotune):
    """Two autotuners over the same ``@triton.jit`` function and configs, one pruning the other's
    winner out: each launches the best of its own candidates."""
    first, second = Bench(), Bench()
    plain = autotune(configs=first.configs(), key=["n"], do_bench=first)(options_kernel)
    no_32 = {"early_config_prune": lambda cs, nargs, **kw: [c for c in cs if c.kwargs["BLOCK"] > 32]}
    pruned = autotune(configs=second.configs(), key=["n"], do_bench=second, prune_configs_by=no_32)
    pruned = pruned(options_kernel)
    x, out = torch.arange(40, dtype=torch.float32), torch.empty(40)
    plain[grid(40)](x, out, 40, 1.0, 0, 1)
    pruned[grid(40)](x, out, 40, 1.0, 0, 1)
    assert plain.best_config.kwargs == {"BLOCK": 32}
    assert pruned.best_config.kwargs == {"BLOCK": 64} and second.timed == [64, 128]


@pytest.mark.parametrize("autotune", both())
def test_keys_interleaved_launch_each_keys_winner(autotune):
    """Two keys with different winners, launched in turn: each launch runs its key's config (and its
    pre_hook), and ``best_config`` follows the launch."""
    bench = Bench()
    times = {40: {16: 1.0, 32: 2.0, 64: 3.0, 128: 4.0}, 100: {16: 4.0, 32: 3.0, 64: 2.0, 128: 1.0}}
    tuner = autotune(configs=bench.configs(), key=["n"], do_bench=bench)(options_kernel)
    winners = []
    for n in (40, 100, 40, 100, 40):
        bench.times = times[n]
        x, out = torch.arange(n, dtype=torch.float32), torch.empty(n)
        tuner[grid(n)](x, out, n, 2.0, 0, 1)
        assert torch.equal(out, 2 * x)
        winners.append((tuner.best_config.kwargs["BLOCK"], bench.launched[-1]))
    assert winners == [(16, 16), (128, 128), (16, 16), (128, 128), (16, 16)]
    assert len(bench.timed) == 2 * len(BLOCKS)
