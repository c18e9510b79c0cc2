"""Forked compile workers: on a machine without a GPU, candidates are compiled for a GPU target by
worker processes forked from this one, which never use CUDA; the verdicts are the ones a GPU gives."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from process_helpers import all_exit, run_script

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="forked compile workers are the Linux default"
)

SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing, os, sys
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.runtime.errors import OutOfResources

    import triton_dejavu_like as tdl
    from triton_dejavu_like import _compat
    from triton_dejavu_like.measure import gate
    from triton_dejavu_like.measure.compile_call import CallSpec, token_of
    from triton_dejavu_like.measure.compile_pool import CompilePool
    from triton_dejavu_like.measure.compile_worker import CannotCompileHere
    from triton_dejavu_like.tuner.errors import candidates_failed


    configs = [triton.Config({"BLOCK": b}, num_stages=s) for b, s in ((16, 1), (128, 3), (48, 1))]


    def make_kernel():  # defined in a function: forked workers need no import to find it
        @tdl.autotune(configs=configs, key=[])
        @triton.jit
        def tile_product(a, b, c, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(a + offs[:, None] * BLOCK + offs[None, :])
            y = tl.load(b + offs[:, None] * BLOCK + offs[None, :])
            tl.store(c + offs[:, None] * BLOCK + offs[None, :], tl.dot(x, y))

        return tile_product


    def compiler_state_inherited():  # the first task of a fresh worker, before it compiles anything
        return _compat.triton_key_function().cache_info().currsize == 1


    if __name__ == "__main__":
        answers = _compat.DriverAnswers(0, GPUTarget("cuda", 90, 32), {"max_shared_mem": 16384})
        kernel = make_kernel()  # kept: Triton 3.2-3.6 keep no reference of their own to a JITFunction
        token = token_of(kernel.kernel_recipe().fn)
        pool = CompilePool(2, 0, "fork", answers)
        pool.start()
        inherited = pool._executor.submit(compiler_state_inherited).result(timeout=60)
        tensor = ("tensor", ("float16", True))
        call = CallSpec(token, (tensor, tensor, tensor), ())
        verdicts = [pool.submit(call, config).result(timeout=300) for config in configs]
        too_big, invalid = (verdict.failure() for verdict in verdicts[1:])
        raised = candidates_failed("no candidate ran", too_big)  # were it the first candidate
        gate_compiled = pool.submit_job(gate.compile_kernel).result(timeout=300)
        registered_later = make_kernel()
        later = token_of(registered_later.kernel_recipe().fn)  # registered after the fork
        lost = CallSpec(later, call.args, ())
        try:
            pool.submit(lost, configs[0]).result(timeout=60)
            handed_back = False
        except CannotCompileHere:
            handed_back = True
        pids = {pool._executor.submit(os.getpid).result() for _ in range(8)}
        children = [p.pid for p in multiprocessing.active_children()]
        pool.shutdown(wait=True)
        print(json.dumps({
            "verdicts": [verdict and verdict.reason for verdict in verdicts],
            "too_big": [type(too_big).__name__, too_big.required, too_big.limit, too_big.name],
            "invalid": [type(invalid).__name__, invalid.src is not None],
            "raised": [isinstance(raised, OutOfResources), type(raised.__cause__).__name__,
                       raised.__cause__.required, raised.required, raised.limit],
            "gate_compiled": gate_compiled,
            "handed_back": handed_back,
            "inherited": inherited,
            "worker_pids": sorted(pids),
            "children": children,
            "parent": os.getpid(),
            "left": [p.pid for p in multiprocessing.active_children()],
        }))
    """
)


def test_forked_workers_compile_for_the_gpu_and_rule_out_what_cannot_run(tmp_path):
    cache = tmp_path / "triton-cache"
    result = run_script(
        tmp_path,
        "kernels.py",
        SCRIPT,
        timeout=600,
        TRITON_CACHE_DIR=str(cache),
        TRITON_DEFAULT_FP_FUSION="1",
        TRITON_DEJAVU_STORAGE=str(tmp_path),
    )
    fits, too_big, invalid = result["verdicts"]
    assert fits is None  # compiled, and fits the device
    assert "shared memory" in too_big and "16384" in too_big  # the device's limit, no GPU needed
    assert invalid and "shared memory" not in invalid  # 48 is not a power of 2: a compile error
    # each reason names its error's class: when no candidate runs, the error raised is one of it
    assert too_big.startswith("OutOfResources: ") and invalid.startswith("CompilationError: ")
    # and the worker's exceptions come back as themselves, with their attributes: the error raised
    # when no candidate runs has the candidate's as its cause, as in process
    name, required, limit, resource = result["too_big"]
    assert (name, limit, resource) == ("OutOfResources", 16384, "shared memory") and required > limit
    assert result["invalid"] == ["CompilationError", True]
    assert result["raised"] == [True, "OutOfResources", required, required, 16384]
    assert result["inherited"]  # Triton's own hash is computed once, before the fork, not per worker
    assert result["handed_back"]  # a worker that does not know the kernel never rules a candidate out
    assert len(result["children"]) == 2  # the pool's size
    assert set(result["worker_pids"]) <= set(result["children"])  # tasks run in the workers
    assert result["left"] == []  # no worker outlives the pool
    # the parent will read the one that fits from disk; the one over the limit stopped before
    # machine code (its compile left IR up to the stage that allocates shared memory, no PTX)
    stages = [{p.name for p in d.iterdir()} for d in cache.iterdir() if d.is_dir()]
    assert sum("tile_product.cubin" in s for s in stages) == 1
    assert sum("tile_product.ttgir" in s and "tile_product.ptx" not in s for s in stages) == 1
    # the stream gate's kernel, compiled ahead by a worker: the first timing loads it from disk
    assert result["gate_compiled"] is None
    assert sum("_hold.cubin" in s for s in stages) == 1


def test_compile_start_is_fork_by_default_and_a_typo_is_reported_once(monkeypatch):
    from triton_dejavu_like import DejavuConfigWarning, _env, _log

    monkeypatch.delenv(_env.COMPILE_START, raising=False)
    assert _env.compile_start() == "fork"
    monkeypatch.setenv(_env.COMPILE_START, "forkserver")
    assert _env.compile_start() == "forkserver"
    _log.forget_warnings()
    monkeypatch.setenv(_env.COMPILE_START, "spwan")
    with pytest.warns(DejavuConfigWarning, match="TRITON_DEJAVU_COMPILE_START"):
        assert _env.compile_start() == "fork"  # the default applies; the launch never fails
    import warnings

    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        assert _env.compile_start() == "fork"
    assert again == []  # reported once, not at every tuning run


@pytest.mark.parametrize(
    ("raw", "mode"), [("", "auto"), ("auto", "auto"), ("1", "on"), ("on", "on"), ("0", "off"), ("off", "off")]
)
def test_compile_processes_values(monkeypatch, raw, mode):
    """``off`` must mean threads only and ``on`` processes for any size: the tuner compares the
    returned mode with these names."""
    from triton_dejavu_like import _env

    monkeypatch.setenv(_env.COMPILE_PROCESSES, raw)
    assert _env.compile_processes() == mode


@pytest.mark.parametrize(
    ("processes", "start", "main_harmless", "isolated", "warned"),
    [
        ("on", "fork", True, False, "TRITON_DEJAVU_COMPILE_PROCESSES=1: an argument of type object"),
        ("on", "fork", True, True, "TRITON_DEJAVU_COMPILE_PROCESSES=1: each isolated worker compiles"),
        (
            "auto",
            "forkserver",
            False,
            False,
            'TRITON_DEJAVU_COMPILE_START=forkserver: .*if __name__ == "__main__"',
        ),
        ("auto", "forkserver", True, True, "TRITON_DEJAVU_COMPILE_START=forkserver: each isolated worker"),
        ("auto", "fork", True, False, None),  # auto chose processes: threads instead is no news
        ("auto", "fork", True, True, None),
    ],
)
def test_compiling_in_threads_where_processes_were_asked_for_is_reported(
    monkeypatch, processes, start, main_harmless, isolated, warned
):
    """A run that would compile in worker processes but cannot (an argument that cannot travel, a main
    script each fork-server worker would run again, isolated workers that compile what they time)
    compiles in threads: said once where the environment asked for processes."""
    import types
    import warnings

    from kernels import add_kernel

    from triton_dejavu_like import DejavuConfigWarning, _env
    from triton_dejavu_like.measure import compile_pool

    monkeypatch.setenv(_env.COMPILE_PROCESSES, processes)
    monkeypatch.setenv(_env.COMPILE_START, start)
    monkeypatch.setattr(compile_pool, "main_reimport_is_harmless", lambda: main_harmless)
    isolation = types.SimpleNamespace(active=lambda: isolated)
    recipe = types.SimpleNamespace(fn=add_kernel, kernel_name="add_kernel", isolation=isolation)
    ctx = types.SimpleNamespace(interpreted=False, args=(object(),), kwargs={})
    configs = [None] * _env.PROCESS_COMPILE_MIN[start]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert compile_pool.compile_in_processes(recipe, ctx, configs) is None
    said = [str(w.message) for w in caught if issubclass(w.category, DejavuConfigWarning)]
    if warned is None:
        assert said == []
    else:
        assert len(said) == 1 and re.search(f"add_kernel: compiling in threads despite {warned}", said[0])


LEFT_BEHIND = textwrap.dedent(
    """
    import json, os, sys
    from triton.backends.compiler import GPUTarget

    from triton_dejavu_like import _compat
    from triton_dejavu_like.measure.compile_pool import CompilePool

    if __name__ == "__main__":
        answers = _compat.DriverAnswers(0, GPUTarget("cuda", 90, 32), {"max_shared_mem": 16384})
        pool = CompilePool(2, 0, "fork", answers)
        pool.start()
        pool._executor.submit(os.getpid).result(timeout=60)
        print(json.dumps(sorted(pool._executor._processes)), flush=True)  # the pool's workers
        os._exit(0)  # killed, or left without shutting anything down
    """
)


def test_workers_of_a_process_that_died_exit_and_release_its_stdout(tmp_path):
    # a serving engine reads a worker process's stdout until it ends: workers that outlived their
    # parent held it open, and the reader waited forever
    script = tmp_path / "left_behind.py"
    script.write_text(LEFT_BEHIND)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "triton-cache"), TRITON_DEJAVU_STORAGE=str(tmp_path))
    process = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    workers = json.loads(process.stdout.readline())
    try:
        assert process.wait(timeout=60) == 0
        assert len(workers) == 2 and process.pid not in workers
        assert all_exit(workers)
        assert process.stdout.read() == ""  # the end of the output, not a wait for it
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


INHERITED = textwrap.dedent(
    """
    import json, os, sys, threading
    from triton.backends.compiler import GPUTarget

    from triton_dejavu_like import _compat
    from triton_dejavu_like.measure.compile_pool import CompilePool

    if __name__ == "__main__":
        answers = _compat.DriverAnswers(0, GPUTarget("cuda", 90, 32), {"max_shared_mem": 16384})
        pool = CompilePool._instance = CompilePool(2, 0, "fork", answers)  # shut down at exit
        pool.start()

        def workers():  # one of them answers; the pool's processes
            return pool._executor.submit(os.getpid).result(timeout=60), sorted(pool._executor._processes)

        before = workers()
        held, release = threading.Event(), threading.Event()

        def hold_the_lock():  # another thread of the program is choosing a pool during the fork
            with CompilePool._lock:
                held.set()
                release.wait()

        threading.Thread(target=hold_the_lock).start()
        held.wait()
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # e.g. a data loader's worker, which leaves through the normal exit path
            os.close(read)
            free = CompilePool._lock.acquire(timeout=5)
            seen = {"pool": CompilePool._instance is not None, "lock_free": free}
            os.write(write, json.dumps(seen).encode())
            sys.exit(0)
        os.close(write)
        release.set()
        seen = json.loads(os.read(read, 4096))
        _, status = os.waitpid(child, 0)
        after = workers()
        pool.shutdown(wait=True)
        print(json.dumps({"child": seen, "status": status, "before": before, "after": after}))
    """
)


def test_a_forked_child_neither_uses_nor_shuts_down_its_parents_compile_workers(tmp_path):
    # the workers and their pipes belong to the parent: a child that submitted to them would
    # never see its results (the parent reads them), and one whose exit shut them down would
    # break the parent's next tuning run
    result = run_script(tmp_path, "inherited.py", INHERITED)
    assert result["child"] == {"pool": False, "lock_free": True}  # it would start a pool of its own
    assert result["status"] == 0
    (pid, before), (after_pid, after) = result["before"], result["after"]
    assert len(before) == 2 and pid in before  # the parent's workers ...
    assert after == before and after_pid in after  # ... untouched: the same two still answer


IDLE = textwrap.dedent(
    """
    import json, os, threading, time
    from triton.backends.compiler import GPUTarget

    from triton_dejavu_like import _compat
    from triton_dejavu_like.measure import compile_pool
    from triton_dejavu_like.measure.compile_pool import CompilePool


    def job():  # a compile job of the tuning process's (it compiles nothing here)
        return None


    def idle_timers():
        return [t.name for t in threading.enumerate() if t.name == "compile-pool-idle"]


    def running(pids, wait_s=0.0):  # those of pids that have not exited (within wait_s)
        deadline = time.monotonic() + wait_s
        while True:
            left = []
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/stat") as stat:
                        if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                            left.append(pid)
                except FileNotFoundError:
                    pass
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.05)


    if __name__ == "__main__":
        compile_pool.IDLE_RELEASE_S = 0.5
        answers = _compat.DriverAnswers(0, GPUTarget("cuda", 90, 32), {"max_shared_mem": 16384})
        with CompilePool.in_use():  # a tuning run
            pool = CompilePool._instance = CompilePool(2, 0, "fork", answers)
            pool.start()
            pool.submit_job(job).result(timeout=60)
            workers = sorted(pool._executor._processes)
            time.sleep(2.0)  # a run that compiles nothing for a while (timing what is compiled)
            kept = CompilePool._instance is pool
            during = {"kept": kept, "timers": idle_timers(), "running": running(workers)}
        just_after = {"kept": CompilePool._instance is pool, "timers": idle_timers()}
        time.sleep(2.5)
        kept = CompilePool._instance is not None
        after = {"kept": kept, "timers": idle_timers(), "running": running(workers, 10)}
        print(json.dumps({"workers": workers, "during": during, "just_after": just_after, "after": after}))
    """
)


def test_an_idle_pool_is_shut_down_and_its_workers_exit(tmp_path):
    # a serving process that tuned at its start would otherwise keep min(16, cores) idle workers
    # (their memory) for the rest of its life
    result = run_script(tmp_path, "idle.py", IDLE)
    workers = result["workers"]
    assert len(workers) == 2
    # never shut down under a tuning run, even while it compiles nothing
    assert result["during"] == {"kept": True, "timers": [], "running": workers}
    assert result["just_after"] == {"kept": True, "timers": ["compile-pool-idle"]}
    assert result["after"] == {"kept": False, "timers": [], "running": []}  # while this process lives


RETIRED = textwrap.dedent(
    """
    import gc, json, os, time, weakref
    from triton.backends.compiler import GPUTarget

    from triton_dejavu_like import _compat
    from triton_dejavu_like.measure import compile_pool
    from triton_dejavu_like.measure.compile_pool import CompilePool


    def job():
        return None


    if __name__ == "__main__":
        compile_pool.IDLE_RELEASE_S = 0.2
        answers = _compat.DriverAnswers(0, GPUTarget("cuda", 90, 32), {"max_shared_mem": 16384})
        _compat.DriverAnswers.of_current_device = classmethod(lambda cls: answers)  # no GPU here
        os.environ["TRITON_DEJAVU_COMPILE_THREADS"] = "2"
        retired = []
        for _ in range(3):  # a serving process that tunes now and then
            with CompilePool.in_use():
                pool = CompilePool.shared(0, "fork")
                pool.start()
                pool.submit_job(job).result(timeout=60)
            retired.append(weakref.ref(pool))
            del pool
            deadline = time.monotonic() + 30
            while CompilePool._instance is not None and time.monotonic() < deadline:
                time.sleep(0.05)
        gc.collect()
        with CompilePool.in_use():  # the current pool, shut down at exit
            CompilePool.shared(0, "fork").start()
            workers = sorted(CompilePool._instance._executor._processes)
        print(json.dumps({"alive": sum(ref() is not None for ref in retired), "workers": workers}))
    """
)


def test_pools_shut_down_when_idle_are_not_kept_for_the_life_of_the_process(tmp_path):
    # each pool started registered its own exit handler, which kept it (its executor, queues and
    # driver answers) alive: a process that tunes now and then kept every pool it ever started
    result = run_script(tmp_path, "retired.py", RETIRED)
    assert result["alive"] == 0
    assert len(result["workers"]) == 2 and all_exit(result["workers"])  # the last one shut down at exit


def test_a_kernel_given_to_compile_workers_is_freed_once_deleted():
    """The kernels that forked workers know were kept for the life of the process: a server making
    kernels in a function (one per model loaded, say) kept every one, with its compiled binaries."""
    import gc
    import weakref

    import triton
    import triton.language as tl

    import triton_dejavu_like as tdl
    from triton_dejavu_like.measure.compile_call import token_of

    def make_kernel():
        @tdl.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=[])
        @triton.jit
        def fill(out, BLOCK: tl.constexpr):
            tl.store(out + tl.arange(0, BLOCK), 1.0)

        return fill

    kernels = [make_kernel() for _ in range(3)]
    tokens = [token_of(k.kernel_recipe().fn) for k in kernels]
    assert token_of(kernels[0].kernel_recipe().fn) == tokens[0]  # a kernel keeps its token
    gone = [weakref.ref(k.kernel_recipe().fn) for k in kernels]
    del kernels
    gc.collect()
    assert all(ref() is None for ref in gone)
    assert token_of(make_kernel().kernel_recipe().fn) not in tokens  # never another kernel's token


CRASHING = textwrap.dedent(
    """
    import json, math, multiprocessing, os, resource, subprocess, sys, time
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    import triton_dejavu_like as tdl
    from triton_dejavu_like import _compat
    from triton_dejavu_like.measure.compile_call import CallSpec, token_of
    from triton_dejavu_like.measure.compile_pool import CompilePool, compiled_safely
    from triton_dejavu_like.measure.pipeline import Pipeline
    from triton_dejavu_like.search import BatchSearch, Budget, SearchSpace, make_strategy

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32, 64) for w in (2, 4)]


    @tdl.autotune(configs=configs, key=[])
    @triton.jit
    def copy(a, b, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(b + offs, tl.load(a + offs))


    def crash_the_compiler(**hook):  # a config the compiler dies on (an LLVM abort, say)
        if os.environ.get("SLOW_COMPILE_S"):  # or every config compiles slowly, and fine
            time.sleep(float(os.environ["SLOW_COMPILE_S"]))
            return
        if "num_warps=2," in hook["repr"]:
            hang_log = os.environ.get("HANG_LOG")
            if hang_log:  # or hangs on, waiting for a tool it started (ptxas, say)
                tool = subprocess.Popen(["sleep", "600"])
                with open(hang_log, "a") as log:
                    log.write(f"{tool.pid}\\n")
                tool.wait()
            os.abort()


    if __name__ == "__main__":
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        answers = _compat.DriverAnswers(0, GPUTarget("cuda", 90, 32), {"max_shared_mem": 232448})
        pools = []

        def fresh(cls=None, device=0, method="fork"):
            pool = CompilePool(2, 0, "fork", answers)
            pools.append(pool)
            return pool

        CompilePool.shared = classmethod(fresh)
        if hasattr(triton, "knobs"):  # 3.4+; in this process and the workers
            triton.knobs.runtime.jit_cache_hook = crash_the_compiler
        else:  # 3.2, 3.3: the same hook, with the same repr
            triton.runtime.jit.JITFunction.cache_hook = crash_the_compiler
        token = token_of(copy.kernel_recipe().fn)
        tensor = ("tensor", ("float32", True))
        call = CallSpec(token, (tensor, tensor), ())
        search = BatchSearch(make_strategy("exhaustive"), SearchSpace.from_configs(configs), Budget())
        timed, ruled_out = [], {}

        def measure(i):  # a launch would compile here, from the workers' disk cache
            timed.append(i)
            return 1.0 + i

        def rule_out(i, reason):
            ruled_out[i] = reason
            return math.inf

        first = fresh()
        first.start()
        if sys.argv[1:] == ["first-compiled-safely"]:  # the numerical check's reference, before a search
            streamed, safe = (first, call), []
            for config in configs[:2]:  # the first crashes the compiler, the second compiles
                compiled, streamed = compiled_safely(streamed, config)
                safe.append([compiled, streamed[0] is first])
            print(json.dumps({"safe": safe, "pools": len(pools)}))
            sys.exit(0)
        pipeline = Pipeline(search, configs, measure, rule_out, lambda batch: {}, batch_size=4)
        pipeline.run_streamed(first, call)
        for pool in pools:
            pool.shutdown(wait=True)
        deadline = time.monotonic() + 10  # a broken pool's workers may take a moment to be reaped
        while multiprocessing.active_children() and time.monotonic() < deadline:
            time.sleep(0.05)
        print(json.dumps({
            "timed": sorted(timed),
            "ruled_out": {str(i): r for i, r in ruled_out.items()},
            "pools": len(pools),
            "left": [p.pid for p in multiprocessing.active_children()],
        }))
    """
)


def test_a_slow_compile_waiting_for_a_worker_is_timed_from_its_start_and_not_ruled_out(tmp_path):
    # each of 6 configs compiles in 2 s on 2 workers with a 3 s timeout: the compiles queued behind
    # busy workers wait up to 4 s before a worker takes them, which must not count against them
    slow = {"TRITON_DEJAVU_COMPILE_TIMEOUT": "3", "SLOW_COMPILE_S": "2"}
    result = run_script(tmp_path, "slow.py", CRASHING, timeout=200, **slow)
    assert result["timed"] == list(range(6)) and result["ruled_out"] == {}, result
    assert result["pools"] == 1 and result["left"] == [], result


@pytest.mark.parametrize("compiler", ["crashes", "hangs"])
def test_a_config_compiled_before_it_is_launched_here_cannot_crash_this_process(tmp_path, compiler):
    # the numerical check's reference runs in the tuning process before the search: a worker compiles
    # it first, so a config that crashes the compiler ends a worker (the pool is replaced) and is not
    # launched here, nor is one whose compile overruns TRITON_DEJAVU_COMPILE_TIMEOUT (the workers are
    # stopped, the pool replaced); one that compiles is launched from the disk cache, with the same pool
    hang = {"TRITON_DEJAVU_COMPILE_TIMEOUT": "3", "HANG_LOG": str(tmp_path / "tools.txt")}
    result = run_script(
        tmp_path, "crashing.py", CRASHING, "first-compiled-safely", **(hang if compiler == "hangs" else {})
    )
    assert result == {"safe": [[False, False], [True, False]], "pools": 2}, result


def test_a_config_that_crashes_the_compiler_is_ruled_out_and_the_run_goes_on(tmp_path):
    # the crash ends a worker each time; the tuning process never compiles that config itself
    # (it would end with the same crash), and every other config is compiled by a worker and timed
    result = run_script(tmp_path, "crashing.py", CRASHING)
    crashers = {i for i in range(6) if i % 2 == 0}  # num_warps=2
    assert result["timed"] == sorted(set(range(6)) - crashers), result
    assert {int(i) for i in result["ruled_out"]} == crashers, result
    assert all("compile worker died" in reason for reason in result["ruled_out"].values()), result
    assert 1 + len(crashers) <= result["pools"] <= 1 + 3 * len(crashers), result
    assert result["left"] == [], result


def test_a_compile_that_hangs_is_stopped_with_what_it_started_and_ruled_out(tmp_path):
    # the compiler waits forever for a tool it started: after TRITON_DEJAVU_COMPILE_TIMEOUT the
    # workers are stopped with the tool, the config is ruled out saying so, every other config is
    # compiled by a worker and timed, and no process is left behind
    hang_log = tmp_path / "tools.txt"
    started = time.monotonic()
    limit = {"TRITON_DEJAVU_COMPILE_TIMEOUT": "3", "HANG_LOG": str(hang_log)}
    result = run_script(tmp_path, "hanging.py", CRASHING, timeout=200, **limit)
    hangers = {i for i in range(6) if i % 2 == 0}  # num_warps=2
    assert result["timed"] == sorted(set(range(6)) - hangers), result
    assert {int(i) for i in result["ruled_out"]} == hangers, result
    assert all("TRITON_DEJAVU_COMPILE_TIMEOUT" in r for r in result["ruled_out"].values()), result
    assert result["left"] == [], result
    tools = [int(pid) for pid in hang_log.read_text().split()]
    assert len(tools) >= len(hangers) and all_exit(tools), tools
    assert time.monotonic() - started < 120
