"""Compiling candidates before timing: failures are ruled out, nothing is launched."""

from __future__ import annotations

import pytest
import triton

from triton_dejavu_like import _compat
from triton_dejavu_like.measure import LaunchContext
from triton_dejavu_like.measure.precompile import precompile


class CompileOnlyKernel:
    """Records compile requests; a BLOCK of 0 fails to compile, a real launch is an error."""

    def __init__(self) -> None:
        self.compiled: list[int] = []

    def run(self, *args, grid, warmup, **kwargs):
        assert warmup, "precompile must not launch"
        if kwargs["BLOCK"] == 0:
            raise triton.compiler.errors.CompilationError("src", None, "BLOCK must be positive\nsecond line")
        self.compiled.append(kwargs["BLOCK"])


def context(kernel) -> LaunchContext:
    return LaunchContext(
        fn=kernel,
        args=(1, 2),
        kwargs={"grid": (1,), "warmup": False},
        nargs={},
        pre_hook=lambda *a, **k: pytest.fail("no hook runs while compiling"),
        post_hook=lambda *a, **k: pytest.fail("no hook runs while compiling"),
        benchmarker=None,
        kernel_name="k",
    )


@pytest.mark.parametrize("threads", [1, 4])
def test_failed_compilations_are_ruled_out_with_one_line_reasons(threads):
    if threads > 1 and not _compat.HAS_ASYNC_COMPILE:
        pytest.skip("this Triton compiles serially")
    kernel = CompileOnlyKernel()
    configs = [triton.Config({"BLOCK": b}) for b in (16, 0, 32)]
    failures = precompile(context(kernel), configs, threads=threads)
    assert kernel.compiled == [16, 32]
    assert list(failures) == [configs[1]]
    assert failures[configs[1]].startswith("CompilationError") and "\n" not in failures[configs[1]]


@pytest.mark.parametrize("threads", [1, 4])
def test_compiles_ahead_start_first_and_their_failure_rules_out_nothing(threads):
    if threads > 1 and not _compat.HAS_ASYNC_COMPILE:
        pytest.skip("this Triton compiles serially")
    kernel = CompileOnlyKernel()
    started = []

    def ahead(submit):
        assert submit(lambda: started.append(list(kernel.compiled))) is None  # done with the batch
        assert submit(lambda: 1 / 0) is None  # the code that needs it compiles it itself later

    configs = [triton.Config({"BLOCK": b}) for b in (16, 32)]
    assert precompile(context(kernel), configs, threads=threads, ahead=ahead) == {}
    assert started == [[]]  # before any candidate
    assert kernel.compiled == [16, 32]
