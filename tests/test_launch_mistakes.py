"""Launch mistakes (arguments that do not bind to the kernel, an option every config sets) are a
TypeError naming the argument at the first call of a key, before anything is tuned or stored."""

from __future__ import annotations

import os

import pytest
import torch
import triton
from kernels import FakeBench, add_kernel, grid, noop_kernel, run_add, tuned_add

import triton_dejavu_like as tdl


def _inputs(n: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.arange(n, dtype=torch.float32), torch.ones(n), torch.empty(n)


def _stored_files() -> list[str]:
    root = os.environ["TRITON_DEJAVU_STORAGE"]
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]


MISTAKES = {
    "too few": (lambda x, y, out: ((x, y, out), {}), r"add_kernel\(\) missing 1 required argument: 'n'$"),
    "too few, a keyword": (
        lambda x, y, out: ((x, y), {"n": 64}),
        r"add_kernel\(\) missing 1 required argument: 'out_ptr'$",
    ),
    "too many": (
        lambda x, y, out: ((x, y, out, 64, 16, 1), {}),
        r"add_kernel\(\) takes 5 arguments but 6 were given",
    ),
    "twice": (
        lambda x, y, out: ((x, y, out, 64), {"n": 64}),
        r"add_kernel\(\) got multiple values for argument 'n'$",
    ),
    "a tuned one positionally": (
        lambda x, y, out: ((x, y, out, 64, 16), {}),
        r"tuned meta-parameter 'BLOCK' as positional argument 5",
    ),
    "num_warps": (
        lambda x, y, out: ((x, y, out, 64), {"num_warps": 2}),
        r"multiple values for keyword argument 'num_warps': every config sets num_warps",
    ),
    "num_stages": (
        lambda x, y, out: ((x, y, out, 64), {"num_stages": 2}),
        r"multiple values for keyword argument 'num_stages'",
    ),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_call_that_cannot_launch_fails_before_tuning(mistake):
    """Every candidate failed alike, after the store was opened and each was benchmarked (an
    AutotuningError listing them all), or, for num_warps=, the key was tuned and stored, then the
    launch raised."""
    bench = FakeBench()
    tuner = tuned_add(bench)
    make_call, message = MISTAKES[mistake]
    args, kwargs = make_call(*_inputs())
    with pytest.raises(TypeError, match=message) as info:
        tuner[grid(64)](*args, **kwargs)
    assert not isinstance(info.value, tdl.AutotuningError)
    assert bench.calls == 0 and tuner.cache == {} and tuner.last_decision is None
    assert _stored_files() == []
    run_add(tuner, 64)  # the right call is tuned as usual
    assert bench.calls == 4 and tuner.last_decision == "tuned"


def test_a_decided_key_launched_wrongly_is_a_plain_launch_error():
    """A decided key's launch is the plain one: the same mistake is Triton's own TypeError."""
    tuner = tuned_add(FakeBench())
    run_add(tuner, 64)
    x, y, out = _inputs()
    with pytest.raises(TypeError, match="multiple values for argument 'n'"):
        tuner[grid(64)](x, y, out, 64, n=64)


def test_warmup_with_too_few_arguments_is_refused():
    tuner = tuned_add(FakeBench())
    x, y, out = _inputs()
    with pytest.raises(TypeError, match="missing 1 required argument: 'n'"):
        tuner.run(x, y, out, grid=grid(64), warmup=True)


def test_what_binds_is_accepted():
    """Parameters with defaults may be left out (a key argument left out is not in the key, as
    upstream's); a parameter the configs set or a @triton.heuristics under the tuner sets is not
    missing; an option no config sets may be passed; passthrough passes every tuned one by keyword."""
    bench = FakeBench()
    tuner = tdl.autotune(
        configs=[triton.Config({"BLOCK": b}, num_warps=1) for b in (16, 32)],
        key=["m", "flag"],
        do_bench=bench,
    )(noop_kernel)
    a = torch.ones(4)
    tuner[(1,)](a, a, 4, 8, 1.0)
    assert list(tuner.cache) == [(8, "torch.float32", "torch.float32")]
    tuner[(1,)](a, a, 4, 8, 1.0, flag=1)
    assert (8, 1, "torch.float32", "torch.float32") in tuner.cache

    heuristic = tdl.autotune(
        configs=[triton.Config({}, num_warps=w) for w in (1, 2)], key=["n"], do_bench=bench
    )(triton.heuristics({"BLOCK": lambda args: 32})(add_kernel))
    run_add(heuristic, 64)
    assert heuristic.best_config is not None

    no_ctas = tuned_add(FakeBench(), configs=[triton.Config({"BLOCK": b}, maxnreg=None) for b in (16, 32)])
    x, y, out = _inputs()
    no_ctas[grid(64)](x, y, out, 64, maxnreg=None)  # no config sets maxnreg: passed on as upstream does
    assert torch.equal(out, x + y)

    passthrough = tuned_add(bench)
    passthrough[grid(64)](x, y, out, 64, BLOCK=16, num_warps=2)
    assert passthrough.last_decision == "passthrough"
