"""GPU timing that a busy host thread cannot distort.

A second Python thread spinning in the tuning process (the tuner's own pipeline threads, or a
serving engine's) makes the launching thread stall between recording a start event and launching the
kernel; without the stream gates (``measure/gate.py``) the GPU idles inside the timed interval and
two kernels whose times differ by 2x measure alike. A timed call that synchronises (a hook reading
a tensor) would wait at every gate until it opens by itself; the first such wait turns the gates
off. Run in a fresh process without the interpreter:

    python -m pytest -m gpu tests/test_gpu_timing.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import json, sys, threading, time
    import torch, triton
    import triton.language as tl
    from triton_dejavu_like.measure import gate
    from triton_dejavu_like.measure.bench import GpuBenchmarker, TimingPolicy


    @triton.jit
    def chain(x_ptr, LOOPS: tl.constexpr):  # one block, a dependent chain of LOOPS multiply-adds
        offs = tl.arange(0, 128)
        acc = tl.load(x_ptr + offs)
        for _ in range(LOOPS):
            acc = acc * 1.0001 + 0.5
        tl.store(x_ptr + offs, acc)


    x = torch.zeros(128, device="cuda")
    short = lambda: chain[(1,)](x, LOOPS=20000)
    long = lambda: chain[(1,)](x, LOOPS=40000)
    short(), long()
    torch.cuda.synchronize()
    mode = sys.argv[1]
    GpuBenchmarker.gated = mode != "ungated"
    bench = GpuBenchmarker(None, None, False, TimingPolicy(final_ms=10.0, final_margin=0.0))
    if mode == "sync":  # a timed call that waits for the GPU, as a hook reading a tensor does

        def synced():
            x.sum().item()
            short()

        start = time.perf_counter()
        careful = [q[0] for q in bench.refine([synced, long])]
        print(json.dumps({"elapsed_s": time.perf_counter() - start,
                          "given_up": gate._unavailable is not None, "long_ms": careful[1]}))
        sys.exit(0)
    stop = threading.Event()

    def spin():
        n = 0
        while not stop.is_set():
            n += 1

    threading.Thread(target=spin, daemon=True).start()
    careful = [q[0] for q in bench.refine([short, long])]
    screen = [bench(short)[0], bench(long)[0]]
    stop.set()
    print(json.dumps({"careful": careful[1] / careful[0], "screen": screen[1] / screen[0],
                      "short_ms": careful[0]}))
    """
)


def timing_ratios(mode: str, where: Path) -> dict[str, float]:
    """Run the script in a fresh process: ``gated`` / ``ungated`` time two kernels under a busy
    thread, ``sync`` times a call that synchronises."""
    script = where / "busy_thread_timing.py"  # @triton.jit needs its source in a file
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, str(script), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
def test_a_busy_python_thread_does_not_change_what_is_measured(tmp_path):
    ratios = timing_ratios("gated", tmp_path)
    print(ratios)
    # the long kernel runs twice as many dependent steps: measured so, with or without the thread
    assert 1.8 < ratios["careful"] < 2.2, ratios
    assert 1.8 < ratios["screen"] < 2.2, ratios


@pytest.mark.gpu
def test_a_timed_call_that_synchronises_does_not_stall_the_timing(tmp_path):
    # the call waits for the GPU, which waits at the gate in front of it until the gate gives up:
    # once, then the process times without gates (each further chunk would cost a gate's timeout)
    out = timing_ratios("sync", tmp_path)
    print(out)
    assert out["given_up"], out
    assert out["elapsed_s"] < 20, out
    assert 0.05 < out["long_ms"] < 0.2, out  # timed ungated from then on, and still right


AHEAD = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    import torch, triton
    import triton.language as tl
    from triton_dejavu_like.measure import LaunchContext, gate
    from triton_dejavu_like.measure.compile_pool import CompilePool
    from triton_dejavu_like.measure.precompile import precompile


    @triton.jit
    def clear(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros((BLOCK,), tl.float32))


    def files():
        root = Path(os.environ["TRITON_CACHE_DIR"])
        return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


    if __name__ == "__main__":
        x = torch.zeros(128, device="cuda")  # CUDA is up before the workers start, as in a tuning run
        if sys.argv[1] == "threads":  # fewer candidates than compile workers pay for
            call = {"grid": (1,), "warmup": False}
            ctx = LaunchContext(clear, (x,), call, {"x_ptr": x}, None, None, None, "clear")
            ahead = lambda submit: submit(gate.compile_kernel)
            failures = precompile(ctx, [triton.Config({"BLOCK": 128})], threads=2, ahead=ahead)
            verdict = str(failures) if failures else None
        else:
            pool = CompilePool(2, torch.cuda.current_device(), sys.argv[1])
            pool.start()
            verdict = pool.submit_job(gate.compile_kernel).result(timeout=300)
            pool.shutdown(wait=True)
        before = files()
        made = gate.make_gate() is not None
        if sys.argv[1] == "threads":
            clear[(1,)](x, BLOCK=128)
            torch.cuda.synchronize()
        print(json.dumps({"verdict": verdict, "made": made, "gate_files": sum("_hold" in p for p in before),
                          "written_here": sorted(set(files().items()) - set(before.items()))}))
    """
)


@pytest.mark.gpu
@pytest.mark.parametrize("start", ["fork", "forkserver", "threads"])
def test_the_gate_kernel_a_compile_worker_compiled_is_loaded_not_compiled_again(tmp_path, start):
    # with an empty Triton cache, compiling the gate kernel inside the first timing took about a
    # second of a tuning run; a worker compiles it beside the candidates, for the launch's signature,
    # and builds its launcher (with compile threads: the thread that compiled it, and the first
    # candidate's launcher too)
    script = tmp_path / "ahead.py"
    script.write_text(AHEAD)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    proc = subprocess.run(
        [sys.executable, str(script), start], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["verdict"] is None and out["made"], out
    assert out["gate_files"] > 0, out  # the worker wrote it to the cache
    assert out["written_here"] == [], out  # the gate made here found it there


FIRST_KERNELS = textwrap.dedent(
    """
    import json
    import torch, triton
    import triton.language as tl
    from triton_dejavu_like.measure import gate
    from triton_dejavu_like.measure.bench import GpuBenchmarker, TimingPolicy


    @triton.jit
    def clear(x_ptr):
        tl.store(x_ptr + tl.arange(0, 128), tl.zeros((128,), tl.float32))


    if __name__ == "__main__":
        x = torch.empty(128, device="cuda")  # no kernel of torch's has run in this process yet
        call = lambda: clear[(1,)](x)
        bench = GpuBenchmarker(None, None, False, TimingPolicy(final_margin=0.0))
        bench(call)
        bench.refine([call, call])
        print(json.dumps({"unavailable": gate._unavailable}))
    """
)


@pytest.mark.gpu
def test_the_first_timing_of_a_process_keeps_its_gates(tmp_path):
    # the L2 flush is a torch kernel; its first launch, behind a closed gate, loaded it lazily and
    # waited for the GPU, which waited at the gate: the gate timed out and the whole process (every
    # cold tuning run) timed without gates
    script = tmp_path / "first_kernels.py"
    script.write_text(FIRST_KERNELS)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "CUDA_MODULE_LOADING")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["unavailable"] is None, out
