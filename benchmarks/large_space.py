"""Tuning a 648-config matmul space: exhaustive vs random search vs Bayesian optimisation vs upstream.

Every tuning run is a fresh process with an empty storage directory (``TRITON_DEJAVU_STORAGE``) and
an empty Triton cache (``TRITON_CACHE_DIR``). Per shape and strategy it records the wall time of the
first call (compilation and benchmarking included), the evaluations (the stored entry's
``evaluated``), the chosen config, and the pick's time relative to the best of a careful
re-measurement per shape: the exhaustive run's top 10 and every run's pick, interleaved rounds, the
L2 flushed before each launch, about ``--careful-ms`` per config, in each of
``--careful-processes`` fresh processes (3), each config's time the median over the processes
(processes disagree by up to 3% on a 13 us kernel, ``careful_agreement.py``; before 2026-11-25's
fourth session: one process).

Upstream ``triton.autotune`` over the whole list is estimated, not run: a seeded random sample of
``--upstream-sample`` configs is tuned by upstream in a fresh process (empty Triton cache), each
config's cost (upstream compiles it serially inside its benchmark, then times it with
``do_bench``) is timed, and the sum over the space is estimated as ``first + (N - 1) * mean``: the
process's first config also pays one-time costs, so it counts once and the mean is over the other
``m = n - 1`` configs, with the finite-population standard error
``(N - 1) * sd / sqrt(m) * sqrt(1 - m / (N - 1))``. The compile time per config is measured on
another sample, serially, with ``JITFunction.warmup`` in another fresh process (after one untimed
compile that loads the backend); it gives the "ideal" exhaustive time
``mean compile * N / compile threads + measure + refine`` (the last two from the exhaustive run's
stored phases) to compare ours against.

Budgets: ``--search-max-share`` and ``--search-max-t`` are passed to the decorator for random search
and BO (exhaustive has no budget); without them the package's default (adaptive) budget applies.
``exhaustive-threads`` is exhaustive search with ``TRITON_DEJAVU_COMPILE_PROCESSES=off`` (compile
threads instead of worker processes), ``exhaustive-forkserver`` with
``TRITON_DEJAVU_COMPILE_START=forkserver`` (workers that start CUDA themselves instead of forked
ones). The exhaustive runs, upstream and the compile sample go first, then the seeds round
robin; no new process starts after ``--deadline-min`` (default 7), and the careful stage and the
table follow. Results go to ``--out`` as runs finish; ``--resume`` reuses the runs already there,
so a long experiment can be run in pieces (``--shapes``, ``--strategies``, ``--seeds``,
``--search-max-share``).

    python benchmarks/large_space.py --out large_space.json                 # GPU, ~8 min
    python benchmarks/large_space.py --tiny --out /tmp/large_space.json     # CPU interpreter, seconds
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
STRATEGIES = ("exhaustive", "exhaustive-threads", "exhaustive-forkserver", "random", "bo")
#: Strategies that run with extra environment settings (compile in threads instead of processes).
VARIANT_ENV = {
    "exhaustive-threads": {"TRITON_DEJAVU_COMPILE_PROCESSES": "off"},
    "exhaustive-forkserver": {"TRITON_DEJAVU_COMPILE_START": "forkserver"},
}
GPU_SHAPES = ("4096x4096x4096", "512x4096x1024")
TINY_SHAPES = ("40x32x24", "8x32x16")
TOP = 10
Json = dict[str, Any]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def parse_shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


# --- the kernel, the space, the inputs (imported in the role processes only) ---------------------------


def _import_kernel() -> Any:
    """The examples' raw ``@triton.jit`` matmul kernel (``_common`` first: it picks GPU or interpreter)."""
    sys.path.insert(0, str(EXAMPLES))
    import _common  # noqa: F401
    import matmul

    return matmul.matmul_kernel.fn


def not_256x256(kw: dict[str, int]) -> bool:
    """A 256x256 fp32 accumulator does not fit the register file."""
    return kw["BLOCK_M"] * kw["BLOCK_N"] < 256 * 256


def eight_warps_need_a_64x64_tile(config: Any) -> bool:
    return config.num_warps == 4 or config.kwargs["BLOCK_M"] * config.kwargs["BLOCK_N"] >= 64 * 64


def make_space(tiny: bool) -> Any:
    """768 grid points, 648 kept (GPU); 16 points, 12 kept (interpreter)."""
    import triton_dejavu_like as tdl

    if tiny:
        return tdl.ConfigSpace(
            {"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "BLOCK_K": [16], "GROUP_M": [1, 2]},
            kwarg_conditions=[lambda kw: kw["BLOCK_M"] * kw["BLOCK_N"] < 32 * 32],
            num_warps=[4],
            num_stages=[2, 3],
        )
    return tdl.ConfigSpace(
        {
            "BLOCK_M": [32, 64, 128, 256],
            "BLOCK_N": [32, 64, 128, 256],
            "BLOCK_K": [32, 64, 128],
            "GROUP_M": [1, 8],
        },
        kwarg_conditions=[not_256x256],
        conditions=[eight_warps_need_a_64x64_tile],
        num_warps=[4, 8],
        num_stages=[2, 3, 4, 5],
    )


def config_dict(config: Any) -> Json:
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def config_id(d: Json) -> str:
    return json.dumps(d, sort_keys=True)


def config_label(d: Json) -> str:
    return "{}x{}x{} G{} w{} s{}".format(
        d["BLOCK_M"], d["BLOCK_N"], d["BLOCK_K"], d["GROUP_M"], d["num_warps"], d["num_stages"]
    )


class Problem:
    """Inputs of one shape and launchers for the autotuned and the plain kernel."""

    def __init__(self, shape: str) -> None:
        import torch

        self.torch = torch
        self.gpu = os.environ.get("TRITON_INTERPRET", "") != "1" and torch.cuda.is_available()
        device, dtype = ("cuda", torch.float16) if self.gpu else ("cpu", torch.float32)
        self.M, self.N, self.K = parse_shape(shape)
        gen = torch.Generator(device=device).manual_seed(0)
        self.a = torch.randn((self.M, self.K), device=device, dtype=dtype, generator=gen)
        self.b = torch.randn((self.K, self.N), device=device, dtype=dtype, generator=gen)
        self.c = torch.empty((self.M, self.N), device=device, dtype=dtype)

    def args(self) -> tuple[Any, ...]:
        a, b, c = self.a, self.b, self.c
        return (a, b, c, self.M, self.N, self.K, a.stride(0), a.stride(1), b.stride(0), b.stride(1))

    def launch(self, kernel: Any, **meta: Any) -> None:
        import triton

        def grid(m: Json) -> tuple[int]:
            return (triton.cdiv(self.M, m["BLOCK_M"]) * triton.cdiv(self.N, m["BLOCK_N"]),)

        kernel[grid](*self.args(), self.c.stride(0), self.c.stride(1), **meta)

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def error(self) -> float:
        ref = self.a.float() @ self.b.float()
        return float((self.c.float() - ref).abs().max() / ref.abs().max())


def cpu_do_bench(fn: Callable[[], Any], quantiles: Sequence[float] | None = None, **_: Any) -> Any:
    """A CPU timer for upstream's autotuner under the interpreter (tiny mode only)."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    if quantiles is None:
        return statistics.median(times)
    return [times[min(len(times) - 1, int(q * len(times)))] for q in quantiles]


def sample_configs(space: Any, n: int, seed: int) -> list[Any]:
    configs = space.configs()
    return random.Random(seed).sample(configs, min(n, len(configs)))


# --- roles: one measurement per fresh process ----------------------------------------------------------


def role_tune(spec: Json) -> Json:
    import triton_dejavu_like as tdl

    raw = _import_kernel()
    problem = Problem(spec["shape"])
    space = make_space(spec["tiny"])
    kwargs: Json = {}
    if not spec["strategy"].startswith("exhaustive"):
        kwargs = {"use_bo": True} if spec["strategy"] == "bo" else {"use_random_search": True}
        kwargs["search_seed"] = spec["seed"]
        if spec.get("max_t") is not None:
            kwargs["search_max_search_t"] = spec["max_t"]
        if spec.get("max_share") is not None:
            kwargs["search_max_share"] = spec["max_share"]
    started = time.perf_counter()
    kernel = tdl.autotune(key=["M", "N", "K"], config_space=space, **kwargs)(raw)
    decorate_s = time.perf_counter() - started  # SMAC is imported here for BO
    problem.sync()
    started = time.perf_counter()
    problem.launch(kernel)
    problem.sync()
    first_call_s = time.perf_counter() - started
    doc = json.loads(Path(kernel.cache_path()).read_text())
    entry = next(iter(doc["entries"].values()))
    timed = [(t[0], config_dict(c)) for c, t in kernel.configs_timings.items() if math.isfinite(t[0])]
    timed.sort(key=lambda x: x[0])
    return {
        "first_call_s": first_call_s,
        "decorate_s": decorate_s,
        "decision": kernel.last_decision,
        "evaluated": entry.get("evaluated"),
        "space_size": entry.get("space_size"),
        "failed": sum(1 for t in kernel.configs_timings.values() if not math.isfinite(t[0])),
        "tuning_time_s": entry.get("tuning_time_s"),
        "phases_s": entry.get("phases_s"),
        "best": config_dict(kernel.best_config),
        "best_ms": kernel.configs_timings[kernel.best_config][0],
        "top": [c for _, c in timed[:TOP]],
        "stored_top": entry.get("top"),  # the finalists, with their careful-stage timings
        "max_error": problem.error(),
    }


def role_upstream(spec: Json) -> Json:
    import triton

    raw = _import_kernel()
    problem = Problem(spec["shape"])
    configs = sample_configs(make_space(spec["tiny"]), spec["n"], spec["seed"])
    kwargs = {} if problem.gpu else {"do_bench": cpu_do_bench}
    tuner = triton.autotune(configs=configs, key=["M", "N", "K"], **kwargs)(raw)
    per_config: list[float] = []
    bench = tuner._bench  # upstream internals: each call compiles (first launch) and times one config

    def timed_bench(*args: Any, **meta: Any) -> Any:
        start = time.perf_counter()
        try:
            return bench(*args, **meta)
        finally:
            per_config.append(time.perf_counter() - start)

    tuner._bench = timed_bench
    problem.sync()
    started = time.perf_counter()
    problem.launch(tuner)
    problem.sync()
    return {
        "first_call_s": time.perf_counter() - started,
        "per_config_s": per_config,
        "n": len(configs),
        "best": config_dict(tuner.best_config),
        "max_error": problem.error(),
    }


def role_compile(spec: Json) -> Json:
    """Serial compile time of a sample of configs (GPU only: the interpreter compiles nothing)."""
    raw = _import_kernel()
    problem = Problem(spec["shape"])
    configs = sample_configs(make_space(spec["tiny"]), spec["n"], spec["seed"])
    if not problem.gpu:
        return {"compile_s": [], "failures": [], "note": "no compilation under the interpreter"}
    times, failures = [], []
    args = (*problem.args(), problem.c.stride(0), problem.c.stride(1))
    # one config outside the sample first: the first compile of a process also loads the backend
    sampled = {config_id(config_dict(c)) for c in configs}
    spare = next(c for c in make_space(spec["tiny"]).configs() if config_id(config_dict(c)) not in sampled)
    with contextlib.suppress(Exception):
        raw.warmup(*args, grid=(1,), **spare.all_kwargs())
    for config in configs:
        start = time.perf_counter()
        try:
            raw.warmup(*args, grid=(1,), **config.all_kwargs())
            times.append(time.perf_counter() - start)
        except Exception as exc:  # out of resources and the like
            failures.append({"config": config_dict(config), "error": f"{type(exc).__name__}: {exc}"[:200]})
    return {"compile_s": times, "failures": failures}


def role_careful(spec: Json) -> Json:
    """Every listed config timed in interleaved rounds, L2 flushed before each launch (GPU)."""
    raw = _import_kernel()
    problem = Problem(spec["shape"])
    torch = problem.torch
    configs: list[Json] = spec["configs"]
    calls, failed = {}, {}
    for d in configs:
        meta = dict(d)
        try:
            problem.launch(raw, **meta)
            problem.sync()
            calls[config_id(d)] = meta
        except Exception as exc:
            failed[config_id(d)] = f"{type(exc).__name__}: {exc}"[:200]
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda") if problem.gpu else None
    # launches per config: about target_ms of kernel time each (at least 5)
    estimate: dict[str, float] = {}
    for cid, meta in calls.items():
        start = time.perf_counter()
        for _ in range(3):
            problem.launch(raw, **meta)
        problem.sync()
        estimate[cid] = (time.perf_counter() - start) * 1e3 / 3
    target = spec["target_ms"]
    counts = {cid: max(5, min(5000, round(target / max(est, 1e-3)))) for cid, est in estimate.items()}
    samples: dict[str, list[float]] = {cid: [] for cid in calls}
    order = list(calls)
    rng = random.Random(0)
    for round_index in range(max(counts.values(), default=0)):
        rng.shuffle(order)
        pending = []
        for cid in order:
            if round_index >= counts[cid]:
                continue
            if problem.gpu:
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                problem.launch(raw, **calls[cid])
                end.record()
                pending.append((cid, start, end))
            else:
                t0 = time.perf_counter()
                problem.launch(raw, **calls[cid])
                samples[cid].append((time.perf_counter() - t0) * 1e3)
        if pending:
            torch.cuda.synchronize()
            for cid, start, end in pending:
                samples[cid].append(start.elapsed_time(end))
    return {
        "median_ms": {cid: statistics.median(s) for cid, s in samples.items() if s},
        "launches": {cid: len(s) for cid, s in samples.items()},
        "failed": failed,
    }


def combine_careful(measured: Sequence[Json]) -> Json | None:
    """Careful re-measurements of the same configs in several processes, as one: each config's
    median of the per-process medians (a 13 us kernel's ratios differ by up to 3% between processes,
    ``benchmarks/careful_agreement.py``); the per-process medians are kept under ``per_process``."""
    if not measured:
        return None
    ids = set.intersection(*(set(m["median_ms"]) for m in measured))
    return {
        "median_ms": {cid: statistics.median(m["median_ms"][cid] for m in measured) for cid in ids},
        "per_process": [m["median_ms"] for m in measured],
        "launches": measured[0]["launches"],
        "failed": {cid: why for m in measured for cid, why in m["failed"].items()},
    }


ROLES: dict[str, Callable[[Json], Json]] = {
    "tune": role_tune,
    "upstream": role_upstream,
    "compile": role_compile,
    "careful": role_careful,
}


# --- the driver ---------------------------------------------------------------------------------------


def spawn(role: str, spec: Json, env: dict[str, str], timeout_s: float) -> Json:
    cmd = [sys.executable, __file__, "--role", role, "--spec", json.dumps(spec)]
    started = time.perf_counter()
    proc = subprocess.run(
        cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{role} {spec} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - started
    return result


def extrapolate(per_config_s: list[float], sample_total_s: float, space_size: int) -> tuple[float, float]:
    """Upstream's time over the whole space, and its standard error, from a timed random sample.

    The first config of the process also pays one-time costs (backend start, first compile of the
    process): it is counted once, and the other ``n - 1`` configs give the mean per config for the
    remaining ``N - 1``, with the finite-population standard error.
    """
    if len(per_config_s) < 2:
        return sample_total_s * space_size / max(1, len(per_config_s)), 0.0
    first, rest = per_config_s[0], per_config_s[1:]
    n, big_n = len(rest), space_size - 1
    estimate = first + statistics.fmean(rest) * big_n
    stderr = big_n * statistics.stdev(rest) / math.sqrt(n) * math.sqrt(max(0.0, 1 - n / big_n))
    return estimate, stderr


def try_spawn(role: str, spec: Json, env: dict[str, str], timeout_s: float, results: Json) -> Json | None:
    """``spawn``, but a failure is logged and recorded under ``results["failed"]`` instead of raised."""
    try:
        return spawn(role, spec, env, timeout_s)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        log(f"{role} ({spec.get('shape')}): FAILED, going on: {str(exc)[-600:]}")
        results.setdefault("failed", {})[f"{role}/{spec.get('shape')}"] = str(exc)[-3000:]
        return None


def fresh_env(work: Path, name: str, tiny: bool, triton_cache: Path | None = None) -> dict[str, str]:
    run_dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work))
    env = {
        "TRITON_CACHE_DIR": str(triton_cache or run_dir / "triton-cache"),
        "TRITON_DEJAVU_STORAGE": str(run_dir / "storage"),
        "TRITON_DEJAVU_PROGRESS": "0",
    }
    if tiny:
        env["TRITON_INTERPRET"] = "1"
    return env


def run_id(shape: str, strategy: str, seed: int | None, max_t: float | None, max_share: float | None) -> str:
    if strategy.startswith("exhaustive"):
        return f"{shape}/{strategy}"
    return f"{shape}/{strategy}/seed{seed}/t{max_t}/share{max_share}"


def _ratio(x: float | None, y: float | None) -> str:
    return f"{x / y:.2f}x" if x is not None and y else "n/a"


def _med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(results: Json, shapes: Sequence[str], args: argparse.Namespace) -> tuple[str, Json]:
    """The markdown table and the ratios (also stored in the JSON)."""
    lines = [
        "| shape | strategy | runs | tune wall (median, min-max) | evaluations (median) | failed | "
        "chosen config (seed order) | pick / best (median, worst) |",
        "| --- | --- | ---: | --- | ---: | ---: | --- | --- |",
    ]
    ratios: Json = {}
    for shape in shapes:
        careful = results.get("careful", {}).get(shape, {}).get("median_ms", {})
        best_ms = min(careful.values()) if careful else None

        def quality(config: Json, careful: Json = careful, best_ms: float | None = best_ms) -> float | None:
            t = careful.get(config_id(config))
            return t / best_ms if t is not None and best_ms else None

        walls: dict[str, float | None] = {}
        for strategy in STRATEGIES:
            runs = [
                r
                for rid, r in results.get("runs", {}).items()
                if rid == f"{shape}/{strategy}"
                or (
                    rid.startswith(f"{shape}/{strategy}/")
                    and rid.endswith(f"/t{args.search_max_t}/share{args.search_max_share}")
                )
            ]
            if not runs:
                continue
            wall = [r["first_call_s"] for r in runs]
            q = [x for x in (quality(r["best"]) for r in runs) if x is not None]
            walls[strategy] = _med(wall)
            lines.append(
                "| "
                + " | ".join(
                    [
                        shape,
                        strategy,
                        str(len(runs)),
                        f"{_med(wall):.1f} s ({min(wall):.1f}-{max(wall):.1f})",
                        f"{_med([r['evaluated'] for r in runs]):.0f} of {runs[0]['space_size']}",
                        f"{_med([r['failed'] for r in runs]):.0f}",
                        "; ".join(config_label(r["best"]) for r in runs),
                        f"{_med(q):.3f} ({max(q):.3f})" if q else "n/a",
                    ]
                )
                + " |"
            )
        up = results.get("upstream", {}).get(shape)
        up_est = up.get("estimate_s") if up else None
        if up:
            q = quality(up["best"])
            lines.append(
                f"| {shape} | upstream (sample of {up['n']}, extrapolated) | 1 | "
                f"{up_est:.1f} s ± {up['stderr_s']:.1f} (sample: {up['first_call_s']:.1f} s) | "
                f"{up['space_size']} (est.) | | {config_label(up['best'])} (best of its sample) | "
                + (f"{q:.3f} (sample's pick)" if q else "n/a")
                + " |"
            )
        ex = next((r for rid, r in results.get("runs", {}).items() if rid == f"{shape}/exhaustive"), None)
        shape_ratios = {
            "bo_over_exhaustive": walls.get("bo") / walls["exhaustive"]
            if walls.get("bo") and walls.get("exhaustive")
            else None,
            "random_over_exhaustive": walls.get("random") / walls["exhaustive"]
            if walls.get("random") and walls.get("exhaustive")
            else None,
            "bo_over_upstream_estimate": walls["bo"] / up_est if walls.get("bo") and up_est else None,
            "exhaustive_over_upstream_estimate": walls["exhaustive"] / up_est
            if walls.get("exhaustive") and up_est
            else None,
        }
        comp = results.get("compile")
        if ex and comp and comp.get("compile_s"):
            phases = ex.get("phases_s") or {}
            threads = comp["threads"]
            ideal = (
                statistics.fmean(comp["compile_s"]) * ex["space_size"] / threads
                + phases.get("measure", 0.0)
                + phases.get("refine", 0.0)
            )
            shape_ratios["exhaustive_over_ideal"] = ex["first_call_s"] / ideal
            shape_ratios["ideal_s"] = ideal
        ratios[shape] = shape_ratios
    decorate = [r["decorate_s"] for rid, r in results.get("runs", {}).items() if "/bo/" in rid]
    if decorate:
        lines.append(
            f"\nBO's decoration took {_med(decorate):.2f} s (median; SMAC is imported by the tuning "
            "run, inside its tune wall)."
        )
    text = "\n".join(lines) + "\n\nRatios (tuning wall time, first call, medians over seeds):\n"
    for shape, r in ratios.items():

        def fmt(v: float | None) -> str:
            return f"{v:.2f}x" if v is not None else "n/a"

        text += (
            f"- {shape}: BO / exhaustive {fmt(r['bo_over_exhaustive'])}, random / exhaustive "
            f"{fmt(r['random_over_exhaustive'])}, "
            f"BO / upstream estimate {fmt(r['bo_over_upstream_estimate'])}, "
            f"exhaustive / upstream estimate {fmt(r['exhaustive_over_upstream_estimate'])}, exhaustive / "
            f"(sum of compile / threads + measure + refine) {fmt(r.get('exhaustive_over_ideal'))}\n"
        )
    return text, ratios


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--shapes", nargs="+", help=f"MxNxK (default {' '.join(GPU_SHAPES)}; tiny: small ones)"
    )
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="search seeds (random, bo)")
    parser.add_argument(
        "--search-max-share",
        type=float,
        help="random/BO budget: share of the space (default: the package's adaptive budget; tiny 0.5)",
    )
    parser.add_argument(
        "--search-max-t", type=float, default=None, help="random/BO budget: seconds (pkg default)"
    )
    parser.add_argument("--upstream-sample", type=int, default=24, help="configs upstream tunes (0: skip)")
    parser.add_argument("--compile-sample", type=int, default=16, help="configs compiled serially (0: skip)")
    parser.add_argument(
        "--careful-ms", type=float, default=200.0, help="kernel time per config, careful stage"
    )
    parser.add_argument(
        "--careful-processes",
        type=int,
        default=3,
        help="fresh processes for the careful re-measurement (the best is the median over them)",
    )
    parser.add_argument("--no-careful", action="store_true", help="skip the careful re-measurement")
    parser.add_argument("--out", type=Path, help="JSON results (written as runs finish)")
    parser.add_argument("--resume", action="store_true", help="reuse the runs already in --out")
    parser.add_argument(
        "--tiny", action="store_true", help="interpreter on CPU tensors, tiny shapes and space"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds per process")
    parser.add_argument(
        "--deadline-min",
        type=float,
        default=7.0,
        help="start no new tuning or upstream process after this many minutes (0: none); the careful "
        "stage and the table still follow",
    )
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        print(json.dumps(ROLES[args.role](json.loads(args.spec))))
        return 0
    if args.out is None:
        parser.error("--out FILE is required")
    if args.search_max_share is None and args.tiny:
        args.search_max_share = 0.5
    shapes = args.shapes or list(TINY_SHAPES if args.tiny else GPU_SHAPES)
    results: Json = {"runs": {}, "upstream": {}, "careful": {}}
    if args.resume and args.out.exists():
        results.update(json.loads(args.out.read_text()))
    results["settings"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    threads = min(16, os.cpu_count() or 1)

    def save() -> None:
        args.out.write_text(json.dumps(results, indent=1))

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tdl-large-space-") as tmp:
        work = Path(tmp)
        cache_of: dict[str, dict[str, str]] = {}

        def out_of_time(what: str) -> bool:
            if args.deadline_min and time.perf_counter() - started > args.deadline_min * 60:
                log(f"{what}: skipped, past --deadline-min {args.deadline_min}")
                results.setdefault("skipped", []).append(what)
                return True
            return False

        def tune(shape: str, strategy: str, seed: int | None) -> None:
            rid = run_id(shape, strategy, seed, args.search_max_t, args.search_max_share)
            if rid in results["runs"]:
                log(f"{rid}: kept from {args.out}")
                return
            if out_of_time(rid):
                return
            env = {**fresh_env(work, "tune", args.tiny), **VARIANT_ENV.get(strategy, {})}
            spec = {"shape": shape, "strategy": strategy, "seed": seed, "tiny": args.tiny}
            spec.update(max_t=args.search_max_t, max_share=args.search_max_share)
            log(f"{rid}: tuning in a fresh process")
            try:
                r = spawn("tune", spec, env, args.timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:  # e.g. no SMAC for BO
                log(f"{rid}: FAILED, going on: {str(exc)[-600:]}")
                results.setdefault("failed", {})[rid] = str(exc)[-3000:]
                save()
                return
            results["runs"][rid] = r
            if strategy == "exhaustive":
                cache_of[shape] = env
            save()
            log(
                f"{rid}: {r['decision']} in {r['first_call_s']:.1f} s, {r['evaluated']} of "
                f"{r['space_size']} evaluated, {r['failed']} failed, pick {config_label(r['best'])}"
            )

        def upstream(shape: str) -> None:
            if shape in results["upstream"] or out_of_time(f"{shape}/upstream"):
                return
            spec = {"shape": shape, "n": args.upstream_sample, "seed": 0, "tiny": args.tiny}
            log(f"{shape}: upstream triton.autotune over a sample of {args.upstream_sample} configs")
            up = try_spawn("upstream", spec, fresh_env(work, "upstream", args.tiny), args.timeout, results)
            if up is None:
                return
            sizes = [r["space_size"] for r in results["runs"].values() if r.get("space_size")]
            space_size = sizes[0] if sizes else len(make_space(args.tiny))
            up["space_size"] = space_size
            up["estimate_s"], up["stderr_s"] = extrapolate(up["per_config_s"], up["first_call_s"], space_size)
            results["upstream"][shape] = up
            save()
            log(
                f"{shape}: upstream sample {up['first_call_s']:.1f} s, whole list estimated "
                f"{up['estimate_s']:.1f} s"
            )

        # Order: what every ratio needs first (exhaustive, upstream, compile), then the seeds round
        # robin over shapes and strategies, so that a deadline drops later seeds, not a whole shape.
        for strategy in [s for s in args.strategies if s.startswith("exhaustive")]:
            for shape in shapes:
                tune(shape, strategy, None)
        if args.upstream_sample:
            for shape in shapes:
                upstream(shape)
        if args.compile_sample and not results.get("compile", {}).get("compile_s"):
            spec = {"shape": shapes[0], "n": args.compile_sample, "seed": 1, "tiny": args.tiny}
            log(
                f"serial compile time of {args.compile_sample} configs "
                "(shape-independent: the same specialisation)"
            )
            comp = try_spawn(
                "compile", spec, fresh_env(work, "compile", args.tiny), args.timeout, results
            ) or {"compile_s": []}
            comp["threads"] = threads
            results["compile"] = comp
            save()
            if comp["compile_s"]:
                log(
                    f"compile: mean {statistics.fmean(comp['compile_s']):.2f} s per config, {threads} threads"
                )
        for seed in args.seeds:
            for shape in shapes:
                for strategy in args.strategies:
                    if not strategy.startswith("exhaustive"):
                        tune(shape, strategy, seed)
        if not args.no_careful:
            for shape in shapes:
                runs = {rid: r for rid, r in results["runs"].items() if rid.startswith(f"{shape}/")}
                picks: dict[str, Json] = {}
                for r in runs.values():
                    picks[config_id(r["best"])] = r["best"]
                ex = runs.get(f"{shape}/exhaustive")
                for c in ex["top"] if ex else []:
                    picks[config_id(c)] = c
                if shape in results["upstream"]:
                    picks[config_id(results["upstream"][shape]["best"])] = results["upstream"][shape]["best"]
                if not picks:
                    continue
                env = cache_of.get(shape) or fresh_env(work, "careful", args.tiny)
                n = args.careful_processes
                log(f"{shape}: careful re-measurement of {len(picks)} configs in {n} processes")
                spec = {"shape": shape, "configs": list(picks.values()), "target_ms": args.careful_ms}
                measured = [try_spawn("careful", spec, env, args.timeout, results) for _ in range(n)]
                careful = combine_careful([m for m in measured if m is not None])
                if careful is not None:
                    results["careful"][shape] = careful
                save()
    text, ratios = summarise(results, shapes, args)
    results["ratios"] = ratios
    results["table"] = text
    results["elapsed_s"] = time.perf_counter() - started
    save()
    print(text, flush=True)
    log(f"done in {results['elapsed_s']:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
