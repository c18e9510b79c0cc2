"""Isolated benchmarking under the interpreter: candidates that raise, hang, or kill their worker.

Tuning must finish, pick the best candidate that ran, and store the others with one-line reasons;
one worker serves candidates until one kills it; hooks run in the worker, on its own copies of the
arguments. Most tests fork their workers (the default under the interpreter); a few start them
from a fork server, which imports this module to find ``fs_add`` by name.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from kernels import (
    FakeBench,
    Refused,
    accumulate_kernel,
    add_kernel,
    block_configs,
    grid,
    observe_block,
    refused,
)
from triton.runtime.errors import InterpreterError, OutOfResources

import triton_dejavu_like as tdl
from triton_dejavu_like.measure import isolation
from triton_dejavu_like.measure.isolation import IsolationError, IsolationSettings

TIMEOUT_S = 1.5
PID_LOG = "TDL_TEST_PID_LOG"  # an environment variable, so that a fork server's workers see it too


def log_pid(nargs, reset_only=False):
    """A hook that appends the pid of the process it runs in to the file named by $TDL_TEST_PID_LOG."""
    if not reset_only and os.environ.get(PID_LOG):
        with open(os.environ[PID_LOG], "a") as f:
            f.write(f"{os.getpid()}\n")


def pids_logged(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def exit_3(nargs):
    os._exit(3)


def sigkill(nargs):
    os.kill(os.getpid(), signal.SIGKILL)


def segfault(nargs):
    faulthandler.disable()  # no Python stack dump in the test log
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def boom(nargs):
    raise RuntimeError("boom")


@triton.jit
def faulty_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    """out = x + y, except: MODE 1 fails a compile-time assertion, MODE 2 never ends."""
    tl.static_assert(MODE != 1)
    if MODE == 2:
        i = 0
        while i < 1:
            i += MODE - 2  # a step of 0
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def launch_add(tuner, n=200):
    x = torch.arange(n, dtype=torch.float32)
    y = torch.ones(n)
    out = torch.empty(n)
    tuner[grid(n)](x, y, out, n)
    assert torch.equal(out, x + y)


def stored_entry(tuner) -> dict:
    (entry,) = json.loads(tuner.cache_path().read_text())["entries"].values()
    return entry


def reasons_by_block(entry: dict) -> dict[int, str]:
    return {r["config"]["kwargs"]["BLOCK"]: r["reason"] for r in entry["ruled_out"]}


def test_bad_candidates_are_ruled_out_and_the_best_that_ran_wins():
    bench = FakeBench({8: 0.1, 16: 4.0, 32: 2.0, 64: 0.2, 128: 0.3, 256: 0.4, 512: 0.5, 1024: 0.6})
    configs = [
        triton.Config({"BLOCK": 8, "MODE": 0}, pre_hook=segfault),
        triton.Config({"BLOCK": 16, "MODE": 0}),
        triton.Config({"BLOCK": 32, "MODE": 0}),
        triton.Config({"BLOCK": 64, "MODE": 1}),  # fails to compile
        triton.Config({"BLOCK": 128, "MODE": 2}),  # loops forever
        triton.Config({"BLOCK": 256, "MODE": 0}, pre_hook=exit_3),
        triton.Config({"BLOCK": 512, "MODE": 0}, pre_hook=sigkill),
        triton.Config({"BLOCK": 1024, "MODE": 0}, pre_hook=boom),
    ]
    tuner = tdl.autotune(
        key=["n"],
        configs=configs,
        do_bench=bench,
        pre_hook=observe_block(bench),
        use_isolated_process=True,
        isolation_timeout_s=TIMEOUT_S,
    )(faulty_add)
    launch_add(tuner)
    assert tuner.best_config.kwargs == {"BLOCK": 32, "MODE": 0}
    entry = stored_entry(tuner)
    reasons = reasons_by_block(entry)
    assert sorted(reasons) == [8, 64, 128, 256, 512, 1024]
    assert "CandidateCrashed: worker killed by SIGSEGV" in reasons[8]
    assert "AssertionError" in reasons[64]
    assert reasons[128].startswith(f"CandidateTimedOut: no result within {TIMEOUT_S:g} s")
    assert reasons[256] == "CandidateCrashed: worker exited with code 3"
    assert reasons[512] == "CandidateCrashed: worker killed by SIGKILL"
    assert reasons[1024] == "RuntimeError: boom"
    assert all("\n" not in r for r in reasons.values())
    assert [t["config"]["kwargs"]["BLOCK"] for t in entry["top"]] == [32, 16]
    assert entry["timings_ms"][0] == 2.0


def test_one_worker_serves_candidates_until_one_kills_it(tmp_path, monkeypatch):
    log = tmp_path / "pids"
    monkeypatch.setenv(PID_LOG, str(log))
    blocks = [16, 32, 64, 128, 256, 512]
    configs = [triton.Config({"BLOCK": b}, pre_hook=exit_3 if b == 64 else None) for b in blocks]
    tuner = tdl.autotune(
        key=["n"],
        configs=configs,
        do_bench=lambda call, quantiles: (call(), call(), [1.0, 1.0, 1.0])[-1],
        pre_hook=log_pid,
        use_isolated_process=True,
        isolation_timeout_s=30,
    )(add_kernel)
    launch_add(tuner)
    pids = pids_logged(log)
    assert os.getpid() not in pids  # every benchmark launch ran in a worker
    # two launches per candidate; 64 kills its worker in its own pre_hook, before the tuner's runs
    assert len(pids) == 2 * (len(blocks) - 1)
    first, second = pids[:4], pids[4:]  # 16 and 32 in the first worker, the rest in its replacement
    assert len(set(first)) == 1 and len(set(second)) == 1 and first[0] != second[0]


def test_forking_workers_while_threads_run_shows_no_warning_and_leaves_the_filters():
    """Python 3.12+ warns (DeprecationWarning) when a process with threads forks: a program with a
    thread of its own, or the tuner's own (a lease's heartbeat, the progress bar's monitor), saw one
    per worker started, about a fork it did not ask for. (It can only fail under Python 3.12+.)"""
    tuner = tdl.autotune(
        key=["n"], configs=block_configs((16, 32)), use_isolated_process=True, isolation_start_method="fork"
    )(add_kernel)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="the-programs-own")
    other.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            filters = list(warnings.filters)
            launch_add(tuner)
            assert warnings.filters == filters  # the filter around the fork is gone again
    finally:
        stop.set()
        other.join()
    assert [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)] == []
    assert tuner.last_decision == "tuned"


@pytest.mark.parametrize("numbers", [True, False], ids=["numbers", "lists"])
def test_configs_timings_hold_what_do_bench_answered_in_a_worker(numbers):
    """``.configs_timings`` holds what the user's do_bench answered (upstream's attribute): one number
    per config for a do_bench that answers numbers, in a worker as in process, so that code reading
    it works whether or not TRITON_DEJAVU_USE_ISOLATED_PROCESS is set."""
    times = {16: 4.0, 32: 1.0, 64: 2.0, 128: 3.0}

    def do_bench(call, quantiles):
        call()
        return 1.0 if numbers else [1.0, 0.5, 2.0]

    def answered(isolated):
        tuner = tdl.autotune(
            key=["n"],
            configs=[triton.Config({"BLOCK": b}) for b in times],
            do_bench=do_bench,
            use_isolated_process=isolated,
        )(add_kernel)
        launch_add(tuner, n=200 if isolated else 300)  # two keys: isolation shares the stored results
        return list(tuner.configs_timings.values())

    assert answered(True) == answered(False) == [1.0 if numbers else [1.0, 0.5, 2.0]] * len(times)


def test_hooks_run_in_the_worker_around_each_launch_on_its_own_copies(tmp_path):
    """acc += x, timed three launches per candidate: the hooks must restore acc around each one."""
    n = 64
    x = torch.arange(n, dtype=torch.float32)
    original = torch.full((n,), 5.0)
    launched: dict[str, torch.Tensor] = {}

    def remember(nargs):  # a per-config pre_hook, run in the worker before each launch
        launched["acc"] = nargs["acc_ptr"]

    def checking_bench(expected):
        def do_bench(call, quantiles):
            for _ in range(3):
                call()
                assert torch.equal(launched["acc"], expected), "the hooks did not run around the launch"
            return [1.0, 1.0, 1.0]

        return do_bench

    configs = [triton.Config({"BLOCK": b}, pre_hook=remember) for b in (16, 32)]
    for hooks, after_each_launch, after_the_call in (
        ({"reset_to_zero": ["acc_ptr"]}, x, x),
        ({"restore_value": ["acc_ptr"]}, original, original + x),
    ):
        tuner = tdl.autotune(
            key=["n"],
            configs=configs,
            do_bench=checking_bench(after_each_launch),
            use_isolated_process=True,
            custom_data_storage=tmp_path / next(iter(hooks)),
            **hooks,
        )(accumulate_kernel)
        acc = original.clone()
        tuner[grid(n)](acc, x, n)
        assert [t[0] for t in tuner.configs_timings.values()] == [1.0, 1.0]  # no candidate failed
        assert torch.equal(acc, after_the_call)


def test_benchmark_launches_never_touch_the_callers_tensors(tmp_path):
    """Without hooks, in-process tuning of acc += x leaves acc changed by every benchmark launch."""
    n = 64
    x = torch.arange(n, dtype=torch.float32)
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32)]
    three_launches = lambda call, quantiles: (call(), call(), call(), [1.0, 1.0, 1.0])[-1]  # noqa: E731
    for isolated, launches in ((False, 7), (True, 1)):
        tuner = tdl.autotune(
            key=["n"],
            configs=configs,
            do_bench=three_launches,
            use_isolated_process=isolated,
            custom_data_storage=tmp_path / str(isolated),
        )(accumulate_kernel)
        acc = torch.zeros(n)
        tuner[grid(n)](acc, x, n)
        assert torch.equal(acc, launches * x)


def test_a_workers_copies_of_views_of_one_buffer_are_views_of_one_copy():
    """q, k and v sliced from one qkv buffer (or an output that aliases an input): in the worker a
    write through one is seen through the others, as in the caller's launch, and never in the
    caller's own tensors."""
    from triton_dejavu_like.measure.isolation.transfer import private_copies

    qkv = torch.arange(12, dtype=torch.float32)
    q, k, v = qkv[:4], qkv[4:8], qkv[8:]
    copied_q, copied_k, copied_v, copied_qkv, n = private_copies((q, k, v, qkv, 12))
    assert n == 12 and [t.storage_offset() for t in (copied_q, copied_k, copied_v)] == [0, 4, 8]
    copied_qkv[5] = -1.0
    assert copied_k[1] == -1.0 and qkv[5] == 5.0


def test_forked_workers_copy_large_tensors_after_this_process_used_its_thread_pool():
    """A child forked after torch ran a parallel CPU op deadlocks in the next one unless it stays serial."""
    big = torch.arange(1 << 21, dtype=torch.float32)
    assert float((big * 2).sum()) > 0  # large enough for torch's CPU thread pool
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32)]
    tuner = tdl.autotune(
        key=["n"],
        configs=configs,
        do_bench=lambda call, quantiles: (call(), [1.0] * 3)[-1],
        use_isolated_process=True,
    )(add_kernel)
    out = torch.zeros_like(big)
    start = time.perf_counter()
    tuner[grid(64)](big, big, out, 64)  # the worker copies all three 8 MB storages
    assert time.perf_counter() - start < 60
    assert torch.equal(out[:64], 2 * big[:64])


def test_environment_turns_isolation_on_and_sets_the_timeout(tmp_path, monkeypatch):
    log = tmp_path / "pids"
    monkeypatch.setenv(PID_LOG, str(log))
    monkeypatch.setenv("TRITON_DEJAVU_USE_ISOLATED_PROCESS", "1")
    monkeypatch.setenv("TRITON_DEJAVU_ISOLATION_TIMEOUT", "1")
    bench = FakeBench({16: 1.0, 32: 2.0})

    def observe(nargs, reset_only=False):
        observe_block(bench)(nargs, reset_only)
        log_pid(nargs, reset_only)

    tuner = tdl.autotune(
        key=["n"],
        configs=[triton.Config({"BLOCK": 16, "MODE": 2}), triton.Config({"BLOCK": 32, "MODE": 0})],
        do_bench=bench,
        pre_hook=observe,
    )(faulty_add)
    launch_add(tuner)
    assert tuner.best_config.kwargs["BLOCK"] == 32
    assert reasons_by_block(stored_entry(tuner))[16].startswith("CandidateTimedOut: no result within 1 s")
    assert pids_logged(log) and os.getpid() not in pids_logged(log)

    monkeypatch.setenv("TRITON_DEJAVU_ISOLATION_TIMEOUT", "soon")
    with pytest.warns(tdl.DejavuConfigWarning, match="TRITON_DEJAVU_ISOLATION_TIMEOUT='soon' is not valid"):
        assert IsolationSettings().timeout() == 120.0  # the default, with one warning naming the variable


@pytest.mark.parametrize("timeout", [float("inf"), 1e7])
def test_a_timeout_without_end_tunes_as_no_timeout(timeout):
    """isolation_timeout_s=float("inf") (what the variable's warning offers as "no timeout") or above
    about 2e6 s made the wait raise OverflowError, taken for every candidate's failure."""
    bench = FakeBench({16: 2.0, 32: 1.0})
    tuner = tdl.autotune(
        key=["n"],
        configs=[triton.Config({"BLOCK": b}) for b in (16, 32)],
        do_bench=bench,
        pre_hook=observe_block(bench),
        use_isolated_process=True,
        isolation_timeout_s=timeout,
        isolation_start_method="fork",
    )(add_kernel)
    x = torch.arange(100, dtype=torch.float32)
    out = torch.zeros(100)
    tuner[grid(100)](x, torch.ones(100), out, 100)
    assert tuner.last_decision == "tuned" and tuner.best_config.kwargs == {"BLOCK": 32}
    assert torch.equal(out, x + 1)


def test_every_candidate_crashing_is_a_clear_error():
    configs = [triton.Config({"BLOCK": b}, pre_hook=exit_3) for b in (16, 32, 64)]
    tuner = tdl.autotune(key=["n"], configs=configs, use_isolated_process=True)(add_kernel)
    with pytest.raises(
        tdl.AutotuningError, match=r"all 3 candidate configs failed.*worker exited with code 3"
    ):
        launch_add(tuner)


def test_every_candidate_failing_in_a_worker_raises_the_workers_error_class():
    """The worker's error comes back as itself: the error raised is an instance of its class (here
    the interpreter's, for a failed static assertion), as upstream's autotuner would raise."""
    configs = [triton.Config({"BLOCK": b, "MODE": 1}) for b in (16, 32)]
    tuner = tdl.autotune(key=["n"], configs=configs, use_isolated_process=True)(faulty_add)
    with pytest.raises(InterpreterError) as info:
        launch_add(tuner)
    assert isinstance(info.value, tdl.AutotuningError)
    assert "all 2 candidate configs failed" in str(info.value)


def test_every_candidate_failing_to_compile_in_a_worker_raises_with_its_error_as_the_cause(monkeypatch):
    """The worker's compile-ahead errors come back as themselves: the error raised has the first
    candidate's as its cause, with its attributes, as in process (``except OutOfResources as e:
    e.required`` works)."""
    from triton_dejavu_like.measure.evaluate import InProcessEvaluator

    def out_of_resources(self, configs):  # the forked worker inherits it
        return {c: OutOfResources(c.kwargs["BLOCK"] * 1000, 1000, "shared memory") for c in configs}

    monkeypatch.setattr(InProcessEvaluator, "prepare", out_of_resources)
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32)]
    tuner = tdl.autotune(key=["n"], configs=configs, use_isolated_process=True)(add_kernel)
    with pytest.raises(OutOfResources) as info:
        launch_add(tuner)
    error = info.value
    assert isinstance(error, tdl.AutotuningError) and "all 2 candidate configs failed" in str(error)
    assert type(error.__cause__) is OutOfResources and error.__cause__.required == 16000
    assert (error.required, error.limit, error.name) == (16000, 1000, "shared memory")


def test_a_workers_exception_that_does_not_pickle_comes_back_as_its_class_with_its_attributes():
    configs = [triton.Config({"BLOCK": b}, pre_hook=refused) for b in (16, 32)]
    tuner = tdl.autotune(key=["n"], configs=configs, use_isolated_process=True)(add_kernel)
    with pytest.raises(Refused) as info:
        launch_add(tuner)
    error = info.value
    assert isinstance(error, tdl.AutotuningError) and "Refused: needs 16000 bytes, has 1000" in str(error)
    assert type(error.__cause__) is Refused and error.__cause__.args == ("needs 16000 bytes, has 1000",)
    assert (error.__cause__.required, error.required, error.limit) == (16000, 16000, 1000)
    assert not hasattr(error.__cause__, "lock")  # what does not pickle stays in the worker


def test_a_workers_exception_that_cannot_be_rebuilt_comes_back_as_its_reason():
    """An exception of a class this process cannot name (defined in a function) is the worker's
    reason, as a compile worker's: no cause, and no class of the package's own in the error."""

    class Local(Exception):
        pass

    def fails(nargs):
        raise Local(f"BLOCK={nargs['BLOCK']} fails")

    configs = [triton.Config({"BLOCK": b}, pre_hook=fails) for b in (16, 32)]
    tuner = tdl.autotune(key=["n"], configs=configs, use_isolated_process=True)(add_kernel)
    with pytest.raises(tdl.AutotuningError) as info:
        launch_add(tuner)
    error = info.value
    assert type(error) is tdl.AutotuningError and error.__cause__ is None
    assert "] Local: BLOCK=16 fails; [BLOCK=32" in str(error) and "WorkerError" not in str(error)


def test_decorator_checks_isolation_arguments():
    with pytest.raises(ValueError, match="isolation_start_method must be one of fork, forkserver, spawn"):
        tdl.autotune(key=["n"], configs=[triton.Config({"BLOCK": 16})], isolation_start_method="thread")(
            add_kernel
        )
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="isolation_timeout_s must be > 0"):
            tdl.autotune(key=["n"], configs=[triton.Config({"BLOCK": 16})], isolation_timeout_s=bad)(
                add_kernel
            )


def test_start_method_follows_the_platform(monkeypatch):
    assert IsolationSettings().method(interpreted=True) == "fork"
    monkeypatch.setattr(isolation.settings, "cuda_initialized", lambda: True)
    assert IsolationSettings().method(interpreted=False) == "forkserver"
    assert IsolationSettings().method(interpreted=True) == "forkserver"  # CUDA is up: no fork
    assert IsolationSettings(start_method="spawn").method(interpreted=False) == "spawn"
    with pytest.raises(IsolationError, match="'fork' cannot be used once CUDA is initialised"):
        IsolationSettings(start_method="fork").method(interpreted=True)


# --- workers that import the kernel (forkserver): it must be reachable by name --------------------

FS_BENCH = FakeBench({16: 3.0, 32: 1.0, 64: 0.5, 128: 2.0})


def fs_observe(nargs, reset_only=False):
    observe_block(FS_BENCH)(nargs, reset_only)
    log_pid(nargs, reset_only)


@tdl.autotune(
    key=["n"],
    configs=[triton.Config({"BLOCK": b}, pre_hook=exit_3 if b == 64 else None) for b in (16, 32, 64, 128)],
    do_bench=FS_BENCH,
    pre_hook=fs_observe,
    use_isolated_process=True,
    isolation_start_method="forkserver",
    isolation_timeout_s=60,
)
@triton.jit
def fs_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def test_forkserver_workers_import_the_kernel_and_receive_the_tensors(tmp_path, monkeypatch):
    log = tmp_path / "pids"
    monkeypatch.setenv(PID_LOG, str(log))
    n = 300
    x, y, out = torch.arange(n, dtype=torch.float32), torch.ones(n), torch.empty(n)
    pointers = [t.data_ptr() for t in (x, y, out)]
    fs_add[grid(n)](x, y, out, n)
    assert torch.equal(out, x + y)
    assert fs_add.best_config.kwargs == {"BLOCK": 32}
    assert reasons_by_block(stored_entry(fs_add)) == {64: "CandidateCrashed: worker exited with code 3"}
    pids = pids_logged(log)
    assert os.getpid() not in pids and len(set(pids)) == 2  # the first worker, and its replacement
    assert [t.data_ptr() for t in (x, y, out)] == pointers  # not moved to shared memory


def timed_here(kernel_call, quantiles):
    """A do_bench that ``fs_add``'s module does not give it (assigned by a test)."""
    kernel_call()
    return [1.0] * len(quantiles)


def test_a_do_bench_a_fresh_worker_cannot_see_fails_tuning_instead_of_timing_with_another(monkeypatch):
    """A do_bench assigned to the kernel outside its module (``kernel.do_bench = ...`` in a test or a
    main function) is not the one a forkserver worker finds when it imports the module: tuning
    fails naming both, rather than timing every candidate with the function the user replaced."""
    monkeypatch.setattr(fs_add, "do_bench", timed_here)
    with pytest.raises(IsolationError, match=r"kernels\.FakeBench.*test_isolation\.timed_here"):
        launch_add(fs_add)


def test_kernels_a_fresh_process_cannot_import_fail_before_any_worker_starts():
    @triton.jit
    def local_kernel(x_ptr, n, BLOCK: tl.constexpr):
        pass

    configs = [triton.Config({"BLOCK": b}) for b in (16, 32)]
    tuner = tdl.autotune(
        key=["n"], configs=configs, use_isolated_process=True, isolation_start_method="spawn"
    )
    with pytest.raises(IsolationError, match="is defined inside a function"):
        tuner(local_kernel)[(1,)](torch.zeros(4), 4)
    rebound = tuner(add_kernel)  # the module-level name add_kernel is the bare kernel, not this tuner
    with pytest.raises(IsolationError, match="is not this autotuner"):
        launch_add(rebound)


def test_a_worker_that_cannot_import_the_kernel_fails_tuning_clearly(tmp_path, monkeypatch):
    source = Path(__file__).with_name("kernels.py").read_text()
    module = tmp_path / "vanishing_kernels.py"
    module.write_text(
        source
        + "\n@tdl.autotune(key=['n'], configs=block_configs((16, 32)), use_isolated_process=True,"
        + " isolation_start_method='forkserver')\n@triton.jit\n"
        + "def vanishing(x_ptr, n, BLOCK: tl.constexpr):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import vanishing_kernels

    try:
        module.unlink()  # this process has imported it; a worker cannot any more
        start = time.perf_counter()
        with pytest.raises(IsolationError, match="a worker could not start: ModuleNotFoundError"):
            vanishing_kernels.vanishing[(1,)](torch.zeros(4), 4)
        assert time.perf_counter() - start < 60
    finally:
        sys.modules.pop("vanishing_kernels", None)


def test_a_failed_compile_ahead_in_a_worker_warns_and_tuning_goes_on(monkeypatch):
    from triton_dejavu_like.measure.isolation import parent

    stage = "prepare"  # (re-timing finalists does not happen under the interpreter's CPU timer)

    real = parent.IsolatedEvaluator._request

    def failing(self, message, timeout_s, what):
        if message[0] == stage:
            raise RuntimeError(f"{stage} failed on purpose")
        return real(self, message, timeout_s, what)

    monkeypatch.setattr(parent.IsolatedEvaluator, "_request", failing)
    tuner = tdl.autotune(
        key=["n"],
        configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128, 256, 512)],
        use_isolated_process=True,
        isolation_timeout_s=30,
    )(add_kernel)
    with pytest.warns(tdl.DejavuTuningWarning, match=f"{stage} failed on purpose"):
        launch_add(tuner)
    assert tuner.last_decision == "tuned"


def test_a_worker_that_survives_sigkill_is_reported():
    """A worker stuck in the kernel (a GPU driver call) does not die of SIGKILL at once: a process
    left behind on the user's GPU is something the user must hear of, not a log record."""
    import multiprocessing

    from triton_dejavu_like.measure.isolation import parent

    class Unkillable:
        pid, exitcode, killed = 2**31 - 1, None, False  # no process has this pid (nor children)

        def kill(self) -> None:
            self.killed = True

        def join(self, timeout: float | None = None) -> None:
            pass

    worker = parent._Worker.__new__(parent._Worker)  # a worker without its process
    ours, theirs = multiprocessing.Pipe()
    worker.process, worker.conn = Unkillable(), ours
    with pytest.warns(
        tdl.DejavuTuningWarning, match=rf"worker \(pid {2**31 - 1}\) did not exit within .* of SIGKILL"
    ):
        worker.kill()
    assert worker.process.killed and ours.closed
    theirs.close()


_TEST_PROCESS = os.getpid()


def leave_a_thread(nargs):
    """A config pre_hook that leaves a non-daemon thread running (a library's background pool) in an
    isolated worker; never in the test's process, which would then wait for it at exit."""
    import threading

    if os.getpid() != _TEST_PROCESS:
        threading.Thread(target=threading.Event().wait, name="left-behind").start()


def test_threads_a_candidate_leaves_in_its_worker_do_not_hold_up_its_stop(monkeypatch):
    """multiprocessing joins a process's non-daemon threads before it exits: a worker that a hook
    left a thread in did not exit when stopped, and the tuning run waited GRACE_S for it."""
    from triton_dejavu_like.measure.isolation import parent

    monkeypatch.setattr(parent, "GRACE_S", 120.0)  # the wait that fails this test, made obvious
    stopped: list[int | None] = []
    real_stop = parent._Worker.stop

    def stop(worker):
        real_stop(worker)
        stopped.append(worker.process.exitcode)

    monkeypatch.setattr(parent._Worker, "stop", stop)
    configs = [triton.Config({"BLOCK": 16}, pre_hook=leave_a_thread), triton.Config({"BLOCK": 32})]
    tuner = tdl.autotune(
        key=["n"],
        configs=configs,
        do_bench=lambda call, quantiles: (call(), [1.0, 1.0, 1.0])[-1],
        use_isolated_process=True,
        isolation_timeout_s=60,
    )(add_kernel)
    begin = time.monotonic()
    launch_add(tuner)
    assert time.monotonic() - begin < 60
    assert stopped == [0]  # it left on its own, not killed


HANGS_IN_A_WORKER = """
import os, sys, torch, triton, triton.language as tl
import triton_dejavu_like as tdl

def hang(nargs):
    with open(os.environ["PID_FILE"], "w") as f:
        f.write(str(os.getpid()))
    while True:
        pass

@tdl.autotune(key=["n"], configs=[triton.Config({"BLOCK": 16}, pre_hook=hang), triton.Config({"BLOCK": 32})],
              do_bench=lambda call, quantiles=None: (call(), [1.0, 1.0, 1.0])[1],
              use_isolated_process=True, isolation_timeout_s=300, isolation_start_method=sys.argv[1])
@triton.jit
def add(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

if __name__ == "__main__":
    x = torch.arange(100, dtype=torch.float32)
    add[(triton.cdiv(100, 16),)](x, torch.zeros(100), 100)
"""


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_worker_busy_in_a_hanging_candidate_ends_with_the_tuning_process(tmp_path, method):
    """The tuning process is killed while a worker spins in a candidate that hangs: a fork server's
    worker lived on for ever (at full CPU, holding the caller's stdout), as did the fork server (its
    children hold its own pipe, so it never saw its parent go) and PR_SET_PDEATHSIG never fired."""
    from process_helpers import REPO, all_exit

    script, pid_file = tmp_path / "hangs.py", tmp_path / "worker.pid"
    script.write_text(HANGS_IN_A_WORKER)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PID_FILE": str(pid_file)}
    env["TRITON_DEJAVU_STORAGE"] = str(tmp_path / "storage")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    tuning = subprocess.Popen(
        [sys.executable, str(script), method], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    worker = None
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker = int(pid_file.read_text())
        assert worker != tuning.pid
        tuning.kill()
        tuning.wait(timeout=30)
        assert all_exit([worker], timeout_s=15)
        assert tuning.stdout is not None and tuning.stdout.read() == b""  # nothing holds it open
    finally:
        tuning.kill()
        if worker is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)


@pytest.mark.slow
def test_the_isolation_cost_round_trip_runs_on_the_cpu(tmp_path):
    """docs/isolation.md's CPU command: what a worker start and one request cost, with a do_bench
    that does not launch (the benchmark builds its launch context as the tuner does)."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "isolation_cost.py"
    if not script.is_file():
        pytest.skip(f"no {script} in this tree")
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_DEJAVU_STORAGE": str(tmp_path / "storage")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(script.parents[1]), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(script), "--round-trip", "fork"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [row] = [line for line in done.stdout.splitlines() if line.startswith("| fork |")]
    assert row.endswith("| 32 |")  # one request per candidate of the untimed kernel
