"""Compiling candidates before timing: failures are ruled out, nothing is launched."""

from __future__ import annotations

import inspect
import signal
import threading
import time

import pytest
import triton

from triton_dejavu_like import _compat
from triton_dejavu_like.measure import LaunchContext, one_line_reason
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
def test_failed_compilations_are_ruled_out_with_their_errors(threads):
    """The error itself (in this process), for the error a tuning run raises when none compiled; the
    same with threads asked of a Triton that compiles serially (3.2-3.5)."""
    kernel = CompileOnlyKernel()
    configs = [triton.Config({"BLOCK": b}) for b in (16, 0, 32)]
    failures = precompile(context(kernel), configs, threads=threads)
    assert kernel.compiled == [16, 32]
    assert list(failures) == [configs[1]]
    assert isinstance(failures[configs[1]], triton.compiler.errors.CompilationError)
    reason = one_line_reason(failures[configs[1]])
    assert reason.startswith("CompilationError") and "\n" not in reason


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


class FakeAsyncMode:
    """Triton's AsyncCompileMode as far as precompile sees it: ``warmup=True`` launches submit their
    compile to ``executor``, appending the future to ``raw_futures``; leaving waits for them."""

    active: FakeAsyncMode | None = None

    def __init__(self, executor) -> None:
        self.executor = executor
        self.raw_futures: list = []

    def __enter__(self):
        FakeAsyncMode.active = self
        return self

    def __exit__(self, *exc) -> None:
        FakeAsyncMode.active = None
        for future in self.raw_futures:
            future.exception()


class HandedOverKernel:
    """Each compile runs in the executor (after a pause, so that it is still running when handed
    over); a BLOCK of 0 fails there, as a compile error in the MLIR passes would."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, *args, grid, warmup, **kwargs):
        assert warmup, "precompile must not launch"
        block = kwargs.get("BLOCK")

        def compile_it() -> str:
            time.sleep(0.2)
            if block == 0:
                raise triton.compiler.errors.CompilationError("src", None, "BLOCK must be positive")
            return f"{self.name}{block if block is not None else ''}"

        FakeAsyncMode.active.raw_futures.append(FakeAsyncMode.active.executor.submit(compile_it))


def test_launchers_are_built_beside_the_compiles_once_per_kernel(monkeypatch):
    # up to Triton 3.6 a launcher is a C module built at a kernel's first launch (tenths of a
    # second with an empty cache), which fell into the first timing of a candidate and of the gate
    built: list[tuple[str, str]] = []
    monkeypatch.setattr(_compat, "HAS_ASYNC_COMPILE", True)
    monkeypatch.setattr(_compat, "async_compile_mode", FakeAsyncMode)
    monkeypatch.setattr(
        _compat, "build_launcher", lambda kernel: built.append((kernel, threading.current_thread().name))
    )
    gate_kernel = HandedOverKernel("gate")

    def ahead(submit):
        submit(lambda: gate_kernel.run(grid=(1,), warmup=True))

    configs = [triton.Config({"BLOCK": b}) for b in (0, 16, 32)]
    failures = precompile(context(HandedOverKernel("k")), configs, threads=4, ahead=ahead)
    assert list(failures) == [configs[0]]
    kernels = sorted(kernel for kernel, _ in built)
    assert kernels[0] == "gate" and kernels[1:] in (["k16"], ["k32"])  # one per kernel, none failed
    assert all(thread.startswith("tdl-compile") for _, thread in built)  # not the timing thread


class QueuedCompiles:
    """Hands each compile to Triton's AsyncCompileMode; the compiles take a while. ``interrupt``:
    ``"hand-over"`` raises KeyboardInterrupt while the last candidate is handed over, ``"waiting"``
    interrupts the main thread from the first compile as SIGINT does (``_thread.interrupt_main``,
    with Python's SIGINT handler installed by the test: a test process started with SIGINT ignored,
    as a background job of a shell without job control is, never saw a SIGINT sent to it)."""

    def __init__(self, interrupt: str, last: int) -> None:
        self.interrupt = interrupt
        self.last = last
        self.started: list[int] = []

    def run(self, *args, grid, warmup, **kwargs):
        import _thread

        from triton.runtime._async_compile import active_mode

        block = kwargs["BLOCK"]
        if self.interrupt == "hand-over" and block == self.last:
            raise KeyboardInterrupt

        def compile_it() -> int:
            self.started.append(block)
            if self.interrupt == "waiting" and block == 0:
                time.sleep(0.1)
                _thread.interrupt_main()
            time.sleep(0.3)
            return block

        mode = active_mode.get()
        hooks = [lambda kernel: None, lambda future_kernel: None]  # finalize, and cleanup (3.9+)
        mode.submit(block, compile_it, *hooks[: len(inspect.signature(mode.submit).parameters) - 2])


@pytest.mark.parametrize("interrupt", ["hand-over", "waiting"])
def test_an_interrupt_does_not_wait_for_the_compiles_still_queued(monkeypatch, interrupt):
    """Ctrl-C while a batch compiles: the compiles already running finish, the queued ones never start
    (they used to run to the last one before the interrupt reached the user)."""
    if not _compat.HAS_ASYNC_COMPILE:
        pytest.skip("this Triton compiles serially")
    monkeypatch.setattr(_compat, "build_launcher", lambda kernel: None)
    kernel = QueuedCompiles(interrupt, last=19)
    configs = [triton.Config({"BLOCK": b}) for b in range(20)]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever an earlier test left
    try:
        with pytest.raises(KeyboardInterrupt):
            precompile(context(kernel), configs, threads=2)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(kernel.started) <= 4, f"{len(kernel.started)} compiles ran after the interrupt"
