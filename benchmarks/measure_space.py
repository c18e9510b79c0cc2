"""Brute-force measure an example kernel's whole tuning space and write it as a Kernel Tuner cachefile.

The examples' own spaces are small (attention 4 configs, RMSNorm 8), so each case here is a wider
``ConfigSpace`` over the same ``@triton.jit`` kernel of ``examples/``:

- ``attention`` (examples/attention.py, batch 4, 16 heads, 2048 tokens, head_dim 64, causal, fp16):
  BLOCK_M x BLOCK_N in {16..256}^2, num_warps {1,2,4,8,16}, num_stages {1..5}: 625 grid points,
  605 kept (at most 512 fp32 scores per thread);
- ``rmsnorm`` (examples/rmsnorm.py, 8192 x 4096 fp16): BLOCK_N {256..16384}, PROGRAMS {0 (one
  program per row), 1, 2, 4, 8 x SMs (persistent, with the counter-zeroing pre-hook)}, num_warps
  {1..32}, num_stages {1,2,3}: 630 configs;
- ``matmul`` and ``matmul_skinny`` (examples/matmul.py, fp16, 4096x4096x4096 and 512x4096x1024): the
  space of ``benchmarks/large_space.py``, BLOCK_M x BLOCK_N {32..256}^2 (no 256x256), BLOCK_K
  {32,64,128}, GROUP_M {1,8}, num_warps {4,8} (8 only on tiles of at least 64x64), num_stages
  {2..5}: 768 grid points, 648 kept. The skinny shape's space has a second basin (small tiles) that
  the search can settle in;
- ``attention_d128`` (2 x 16 heads, 4096 tokens, head_dim 128, not causal) and ``rmsnorm_tall``
  (65536 x 1024): the attention and RMSNorm grids on other problems;
- ``matmul_decode`` (16x4096x4096), ``attention_long`` (1 x 32 heads, 8192 tokens, head_dim 64,
  causal) and ``rmsnorm_wide`` (2048 x 32768): three more problems, measured after the search's
  settings were chosen;
- ``matmul_deep`` (2048x2048x8192) and ``attention_d128_causal`` (4 x 16 heads, 2048 tokens, head_dim
  128, causal): two more, measured to check a change of the search's settings on spaces it was not
  chosen on.

Every config is compiled first, in ``--jobs`` worker processes sharing one fresh Triton cache (the
compile time recorded per config is its worker's ``JITFunction.warmup`` wall time, after one untimed
compile of a config outside the grid), then launched
and timed in this process: two warm-up launches, then ``--repeats`` launches (fewer, at least 5,
when that would exceed 300 ms), each after an L2 flush (and, for persistent RMSNorm configs, after
the pre-hook), timed with CUDA events. The file
follows Kernel Tuner's cachefile format as ``benchmarks/search_replay.py`` reads it: ``tune_params``,
``tune_params_keys``, and per config ``time`` (mean, ms), ``times``, ``compile_time`` and
``benchmark_time`` (ms); a config that does not compile is ``"CompilationFailedConfig"``, one that
exceeds the GPU's resources when loaded (shared memory, registers) ``"InvalidConfig"``, one that
fails at run time ``"RuntimeFailedConfig"``. Grid points removed by a condition are absent, as
Kernel Tuner leaves out configs that fail its restrictions.

    python benchmarks/measure_space.py --case attention rmsnorm matmul matmul_skinny \
        --out-dir benchmarks/data/search-spaces
    python benchmarks/measure_space.py --tiny --out-dir /tmp      # interpreter, CPU tensors, seconds
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gzip
import itertools
import json
import math
import multiprocessing
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
#: (M, N, K) per matmul case; the interpreter (--tiny) uses a small shape with ragged edges
MATMUL_SHAPES = {
    "matmul": (4096, 4096, 4096),
    "matmul_skinny": (512, 4096, 1024),
    "matmul_decode": (16, 4096, 4096),
    "matmul_deep": (2048, 2048, 8192),
    "matmul_wide": (8192, 8192, 512),
}
#: Other problems for the attention and RMSNorm kernels (the plain case names use the examples'
#: "full" size): the same grid of parameters, another space of times
ATTENTION_SHAPES = {
    "attention_d128": {"batch": 2, "heads": 16, "seq": 4096, "head_dim": 128, "causal": False},
    "attention_long": {"batch": 1, "heads": 32, "seq": 8192, "head_dim": 64, "causal": True},
    "attention_d128_causal": {"batch": 4, "heads": 16, "seq": 2048, "head_dim": 128, "causal": True},
    "attention_short": {"batch": 32, "heads": 16, "seq": 512, "head_dim": 64, "causal": False},
}
RMSNORM_SHAPES = {
    "rmsnorm_tall": {"rows": 65536, "cols": 1024},
    "rmsnorm_wide": {"rows": 2048, "cols": 32768},
}
CASE_NAMES = ("attention", "rmsnorm", *MATMUL_SHAPES, *ATTENTION_SHAPES, *RMSNORM_SHAPES)
Json = dict[str, Any]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Case:
    """A kernel, its grid of tuning parameters, and a launcher for one config on fixed inputs."""

    name: str
    kernel_name: str
    raw: Any  # the @triton.jit function
    params: dict[str, list[Any]]  # tune_params, in tune_params_keys order
    keep: Callable[[dict[str, Any]], bool]  # a grid point's condition
    launch: Callable[..., None]  # launch(meta_with_num_warps_num_stages, warmup=False)
    before_launch: Callable[[dict[str, Any]], None]  # the pre-hook's work (not timed)
    problem: dict[str, Any]
    gpu: bool

    def points(self) -> list[dict[str, Any]]:
        names = list(self.params)
        grid = (dict(zip(names, values)) for values in itertools.product(*self.params.values()))
        return [p for p in grid if self.keep(p)]


def _examples() -> tuple[Any, Any, Any, Any]:
    sys.path.insert(0, str(EXAMPLES))
    import _common  # first: picks the GPU or the interpreter
    import attention
    import matmul
    import rmsnorm

    return _common, attention, rmsnorm, matmul


def scores_fit(point: dict[str, Any]) -> bool:
    """At most 512 fp32 attention scores per thread: larger tiles spill so much that they compile for
    minutes and are never fast (a restriction, as Kernel Tuner has: such points are not recorded)."""
    return point["BLOCK_M"] * point["BLOCK_N"] <= 512 * 32 * point["num_warps"]


def matmul_tile_fits(point: dict[str, Any]) -> bool:
    """large_space.py's conditions: no 256x256 fp32 accumulator (does not fit the register file), and
    8 warps only on tiles of at least 64x64."""
    tile = point["BLOCK_M"] * point["BLOCK_N"]
    return tile < 256 * 256 and (point["num_warps"] == 4 or tile >= 64 * 64)


def build_case(name: str, tiny: bool) -> Case:
    common, attention, rmsnorm, matmul = _examples()
    import torch
    import triton

    gpu = common.ON_GPU
    device, dtype = ("cuda", torch.float16) if gpu else ("cpu", torch.float32)
    gen = torch.Generator(device=device).manual_seed(0)
    if name == "attention" or name in ATTENTION_SHAPES:
        shape = attention.SIZES["tiny"] if tiny else ATTENTION_SHAPES.get(name, attention.SIZES["full"])
        dims = (shape["batch"], shape["heads"], shape["seq"], shape["head_dim"])
        q, k, v = (torch.randn(dims, device=device, dtype=dtype, generator=gen) for _ in range(3))
        o = torch.empty_like(q)
        seq, head_dim = shape["seq"], shape["head_dim"]
        scale = attention.LOG2_E / math.sqrt(head_dim)
        if tiny:
            params: dict[str, list[Any]] = {
                "BLOCK_M": [16, 32],
                "BLOCK_N": [16, 24, 32],  # 24: not a power of two, fails like a compile error
                "num_warps": [4],
                "num_stages": [1, 2],
            }
        else:
            blocks = [16, 32, 64, 128, 256]
            params = {
                "BLOCK_M": blocks,
                "BLOCK_N": blocks,
                "num_warps": [1, 2, 4, 8, 16],
                "num_stages": [1, 2, 3, 4, 5],
            }

        def launch_attention(meta: dict[str, Any], warmup: bool = False) -> None:
            grid = (triton.cdiv(seq, meta["BLOCK_M"]), shape["batch"] * shape["heads"])
            args = (q, k, v, o, scale, seq, q.stride(1), q.stride(2))
            kw = {"HEAD_DIM": head_dim, "CAUSAL": shape["causal"], **meta}
            if warmup:
                attention.attention_kernel.fn.warmup(*args, grid=grid, **kw)
            else:
                attention.attention_kernel.fn[grid](*args, **kw)

        return Case(
            name,
            "attention_kernel",
            attention.attention_kernel.fn,
            params,
            scores_fit if not tiny else (lambda p: True),
            launch_attention,
            lambda p: None,
            {**shape, "dtype": str(dtype).removeprefix("torch.")},
            gpu,
        )
    if name == "rmsnorm" or name in RMSNORM_SHAPES:
        shape = rmsnorm.SIZES["tiny"] if tiny else RMSNORM_SHAPES.get(name, rmsnorm.SIZES["full"])
        x = torch.randn((shape["rows"], shape["cols"]), device=device, dtype=dtype, generator=gen)
        w = torch.rand((shape["cols"],), device=device, dtype=dtype, generator=gen) + 0.5
        y = torch.empty_like(x)
        ticket = torch.zeros(1, dtype=torch.int32, device=device)
        sms = torch.cuda.get_device_properties(0).multi_processor_count if gpu else 1
        if tiny:
            params = {"BLOCK_N": [16, 24, 64], "PROGRAMS": [0, 2], "num_warps": [4], "num_stages": [1, 2]}
        else:
            params = {
                "BLOCK_N": [256, 512, 1024, 2048, 4096, 8192, 16384],
                "PROGRAMS": [0, sms, 2 * sms, 4 * sms, 8 * sms],
                "num_warps": [1, 2, 4, 8, 16, 32],
                "num_stages": [1, 2, 3],
            }
        n_rows, n_cols = x.shape

        def launch_rmsnorm(meta: dict[str, Any], warmup: bool = False) -> None:
            grid = (min(n_rows, meta["PROGRAMS"]) if meta["PROGRAMS"] else n_rows,)
            args = (x, w, y, ticket, n_rows, n_cols, x.stride(0), y.stride(0), 1e-6)
            if warmup:
                rmsnorm.rmsnorm_kernel.fn.warmup(*args, grid=grid, **meta)
            else:
                rmsnorm.rmsnorm_kernel.fn[grid](*args, **meta)

        def zero_ticket(meta: dict[str, Any]) -> None:
            if meta["PROGRAMS"]:
                ticket.zero_()  # what the persistent configs' pre_hook does

        return Case(
            name,
            "rmsnorm_kernel",
            rmsnorm.rmsnorm_kernel.fn,
            params,
            lambda p: True,
            launch_rmsnorm,
            zero_ticket,
            {**shape, "dtype": str(dtype).removeprefix("torch."), "sms": sms},
            gpu,
        )
    if name in MATMUL_SHAPES:
        M, N, K = (40, 32, 24) if tiny else MATMUL_SHAPES[name]
        a = torch.randn((M, K), device=device, dtype=dtype, generator=gen)
        b = torch.randn((K, N), device=device, dtype=dtype, generator=gen)
        c = torch.empty((M, N), device=device, dtype=dtype)
        if tiny:
            params = {"BLOCK_M": [16, 32], "BLOCK_N": [16, 24], "BLOCK_K": [16], "GROUP_M": [1, 2],
                      "num_warps": [4], "num_stages": [2]}  # fmt: skip
        else:
            params = {
                "BLOCK_M": [32, 64, 128, 256],
                "BLOCK_N": [32, 64, 128, 256],
                "BLOCK_K": [32, 64, 128],
                "GROUP_M": [1, 8],
                "num_warps": [4, 8],
                "num_stages": [2, 3, 4, 5],
            }

        def launch_matmul(meta: dict[str, Any], warmup: bool = False) -> None:
            grid = (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
            strides = (*a.stride(), *b.stride(), *c.stride())
            args = (a, b, c, M, N, K, *strides)
            if warmup:
                matmul.matmul_kernel.fn.warmup(*args, grid=grid, **meta)
            else:
                matmul.matmul_kernel.fn[grid](*args, **meta)

        return Case(
            name,
            "matmul_kernel",
            matmul.matmul_kernel.fn,
            params,
            matmul_tile_fits,
            launch_matmul,
            lambda p: None,
            {"M": M, "N": N, "K": K, "dtype": str(dtype).removeprefix("torch.")},
            gpu,
        )
    raise ValueError(name)


# --- compiling (worker processes) ----------------------------------------------------------------------

_worker_case: Case | None = None


#: Per case, a config outside the grid that each worker compiles first, untimed: the first compile of
#: a process also loads the backend, which no config's compile time should include.
SPARE: dict[str, dict[str, Any]] = {
    "attention": {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 6},
    "rmsnorm": {"BLOCK_N": 128, "PROGRAMS": 0, "num_warps": 4, "num_stages": 1},
    "matmul": {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1, "num_warps": 4, "num_stages": 1},
}
SPARE.update({name: SPARE["matmul"] for name in MATMUL_SHAPES})
SPARE.update({name: SPARE["attention"] for name in ATTENTION_SHAPES})
SPARE.update({name: SPARE["rmsnorm"] for name in RMSNORM_SHAPES})


def _worker_init(name: str, tiny: bool) -> None:
    global _worker_case
    _worker_case = build_case(name, tiny)
    with contextlib.suppress(Exception):
        _worker_case.launch(SPARE[name], warmup=True)


def compile_one(meta: dict[str, Any]) -> tuple[float, str | None]:
    """Compile one config (warmup: no launch); its wall time in ms and the error, if any."""
    assert _worker_case is not None
    start = time.perf_counter()
    try:
        _worker_case.launch(meta, warmup=True)
        return (time.perf_counter() - start) * 1e3, None
    except Exception as exc:
        return (time.perf_counter() - start) * 1e3, f"{type(exc).__name__}: {exc}"[:300]


def compile_all(
    case: Case, points: list[dict[str, Any]], jobs: int, tiny: bool
) -> list[tuple[float, str | None]]:
    if not case.gpu:  # the interpreter compiles nothing; a bad config fails when launched
        return [(0.0, None)] * len(points)
    results: list[tuple[float, str | None]] = [(0.0, None)] * len(points)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_worker_init, initargs=(case.name, tiny)
    ) as pool:
        futures = {pool.submit(compile_one, p): i for i, p in enumerate(points)}
        for done, future in enumerate(as_completed(futures), 1):
            try:
                results[futures[future]] = future.result()
            except Exception:  # the worker died (BrokenProcessPool): this process compiles it later
                results[futures[future]] = (math.nan, None)
            if done % 100 == 0:
                log(f"  compiled {done}/{len(points)}")
    return results


# --- timing (this process) -----------------------------------------------------------------------------


def time_config(
    case: Case, meta: dict[str, Any], repeats: int, flush: Any, max_ms: float = 300.0
) -> list[float]:
    import torch

    case.before_launch(meta)
    case.launch(meta)  # loads the binary (resource limits are checked here)
    if case.gpu:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    case.before_launch(meta)
    case.launch(meta)
    if case.gpu:
        torch.cuda.synchronize()
    estimate_ms = (time.perf_counter() - t0) * 1e3
    # slow configs get fewer launches: about max_ms of kernel time each, at least 5 launches
    repeats = max(min(repeats, 5), min(repeats, int(max_ms / max(estimate_ms, 1e-3))))
    if not case.gpu:
        times = []
        for _ in range(repeats):
            case.before_launch(meta)
            start = time.perf_counter()
            case.launch(meta)
            times.append((time.perf_counter() - start) * 1e3)
        return times
    torch.cuda.synchronize()
    events = []
    for _ in range(repeats):
        flush.zero_()
        case.before_launch(meta)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        case.launch(meta)
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events]


def failure_kind(error: str) -> str:
    if "OutOfResources" in error or "out of resource" in error.lower():
        return "InvalidConfig"
    return "RuntimeFailedConfig"


def measure(case: Case, jobs: int, repeats: int, tiny: bool) -> Json:
    import torch

    points = case.points()
    log(f"{case.name}: {len(points)} configs; compiling in {jobs} processes")
    started = time.perf_counter()
    compiled = compile_all(case, points, jobs, tiny)
    log(f"{case.name}: compiled in {time.perf_counter() - started:.1f} s; timing each in this process")
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda") if case.gpu else None
    names = list(case.params)
    cache: Json = {}
    stamp = dt.datetime.now(dt.timezone.utc).isoformat(sep=" ")
    for i, (meta, (compile_ms, compile_error)) in enumerate(zip(points, compiled), 1):
        record: Json = {**meta}
        if math.isnan(compile_ms):  # its worker died: compile it here
            c0 = time.perf_counter()
            try:
                case.launch(meta, warmup=True)
            except Exception as exc:
                compile_error = f"{type(exc).__name__}: {exc}"[:300]
            compile_ms = (time.perf_counter() - c0) * 1e3
        t0 = time.perf_counter()
        if compile_error is not None:
            out_of_resources = failure_kind(compile_error) == "InvalidConfig"
            record["time"] = "InvalidConfig" if out_of_resources else "CompilationFailedConfig"
            record["error"] = compile_error
        else:
            try:
                times = time_config(case, meta, repeats, flush)
                record["time"] = statistics.fmean(times)
                record["times"] = times
            except Exception as exc:
                if case.gpu:
                    torch.cuda.synchronize()
                message = f"{type(exc).__name__}: {exc}"[:300]
                # under the interpreter a config that does not build fails here, not in a compile step
                interp_compile = not case.gpu and ("CompilationError" in message or "power of 2" in message)
                record["time"] = "CompilationFailedConfig" if interp_compile else failure_kind(message)
                record["error"] = message
        record.update(
            compile_time=compile_ms,
            verification_time=0,
            benchmark_time=(time.perf_counter() - t0) * 1e3,
            strategy_time=0,
            framework_time=0,
            timestamp=stamp,
        )
        cache[",".join(str(meta[n]) for n in names)] = record
        if i % 100 == 0:
            log(f"  timed {i}/{len(points)}")
    device = torch.cuda.get_device_name() if case.gpu else "CPU (Triton interpreter)"
    return {
        "version": "1.0.0",
        "device_name": device,
        "kernel_name": case.kernel_name,
        "problem_size": case.problem,
        "tune_params_keys": names,
        "tune_params": case.params,
        "objective": "time",
        "measured_by": "benchmarks/measure_space.py (triton_dejavu_like)",
        "repeats": repeats,
        "cache": cache,
    }


def summary(doc: Json) -> str:
    records = list(doc["cache"].values())
    valid = [r["time"] for r in records if not isinstance(r["time"], str)]
    kinds: dict[str, int] = {}
    for r in records:
        if isinstance(r["time"], str):
            kinds[r["time"]] = kinds.get(r["time"], 0) + 1
    grid = math.prod(len(v) for v in doc["tune_params"].values())
    compile_s = sum(r["compile_time"] for r in records) / 1e3
    best = min(valid) if valid else math.nan
    within = sum(1 for t in valid if t <= best * 1.05)
    return (
        f"{doc['kernel_name']} on {doc['device_name']}: {len(records)} of {grid} grid points recorded, "
        f"{len(valid)} valid, invalid {kinds or 0}; worst/best {max(valid) / best:.2f}x, {within} within 5% "
        f"of the best; summed compile {compile_s:.1f} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", nargs="+", choices=CASE_NAMES, default=list(CASE_NAMES))
    parser.add_argument("--out-dir", type=Path, default=Path("."), help="where <case>_<gpu>.json.gz go")
    parser.add_argument(
        "--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="compile processes"
    )
    parser.add_argument("--repeats", type=int, default=32, help="timed launches per config")
    parser.add_argument("--tiny", action="store_true", help="interpreter on CPU tensors, tiny spaces")
    args = parser.parse_args(argv)
    if "TRITON_CACHE_DIR" not in os.environ:  # compile times from an empty cache (workers inherit it)
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="measure-space-triton-cache-")
    if args.tiny:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (build_case imports it)
        args.repeats = min(args.repeats, 3)
    sys.path.insert(0, str(HERE))
    from search_replay import load

    args.out_dir.mkdir(parents=True, exist_ok=True)
    log(
        f"Triton cache: {os.environ['TRITON_CACHE_DIR']} "
        "(set TRITON_CACHE_DIR to choose one; it must start empty)"
    )
    cache_root = os.environ["TRITON_CACHE_DIR"]
    for name in args.case:
        started = time.perf_counter()
        # one empty cache per case: cases over one kernel (matmul, matmul_skinny) build the same
        # binaries, and the second would otherwise record cache hits as its compile times
        os.environ["TRITON_CACHE_DIR"] = os.path.join(cache_root, name)
        case = build_case(name, args.tiny)
        doc = measure(case, args.jobs, args.repeats, args.tiny)
        device = re.sub(r"[^A-Za-z0-9]+", "_", doc["device_name"]).strip("_")
        path = args.out_dir / f"{name}_{device}.json.gz"
        with gzip.open(path, "wt") as handle:
            json.dump(doc, handle)
        replay = load(path)  # the replay's own loader must accept it
        log(summary(doc))
        log(
            f"{path}: loads in search_replay ({len(replay.space)} candidates, best {replay.best_ms:.4f} ms); "
            f"{time.perf_counter() - started:.0f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
