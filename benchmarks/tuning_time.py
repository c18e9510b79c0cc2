"""Cold tuning time, quality of the chosen config, and restore time: ours vs upstream ``triton.autotune``.

For each case (the matmul and RMSNorm kernels of ``examples/``, see ``gpu_cases.py``), every
measurement runs in a fresh process:

1. upstream tunes with an empty Triton cache (``cache_results=True`` where the release has it),
   then a second process restores through upstream's own cache;
2. ours tunes with an empty Triton cache and empty storage, then fresh processes restore (their
   benchmark calls are counted: there must be none; the time our own code takes on that first
   call, from the miss to the launch, is measured too);
3. a plain ``triton.jit`` launch with our chosen config, first call in a fresh process (warm cache),
   interleaved with the restoring processes (medians of ``--repeats`` of each);
4. a careful measurement of every config (interleaved rounds, L2 flushed), which says how far each
   chosen config is from the best.

    python benchmarks/tuning_time.py [--cases matmul rmsnorm] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _config_dict(config) -> dict:
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def _first_call_ms(launch) -> float:
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    launch()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def role(name: str, case_name: str, extra: dict) -> dict:
    """One measurement, in this (fresh) process."""
    import torch
    import triton
    from gpu_cases import CASES

    import triton_dejavu_like as tdl
    import triton_dejavu_like.measure.bench as tdl_bench

    case = CASES[case_name]()
    inputs = case.make_inputs()
    torch.cuda.synchronize()
    benchmark_calls = []

    def counted(fn):
        def wrapper(*args, **kwargs):
            benchmark_calls.append(fn.__name__)
            return fn(*args, **kwargs)

        return wrapper

    if name in ("upstream-tune", "upstream-restore"):
        kwargs = {"cache_results": True} if "cache_results" in triton.autotune.__code__.co_varnames else {}
        tuner = triton.autotune(configs=case.configs, key=case.key, **kwargs)(case.kernel)
        ms = _first_call_ms(lambda: case.launch(tuner, inputs))
        return {"ms": ms, "best": _config_dict(tuner.best_config), "cache_results": bool(kwargs)}
    if name in ("ours-tune", "ours-restore"):
        triton.testing.do_bench = counted(triton.testing.do_bench)
        tdl_bench.GpuBenchmarker._timed = counted(tdl_bench.GpuBenchmarker._timed)
        miss_ms = []
        on_miss = tdl.Autotuner._on_miss

        def timed_miss(self, *args, **kwargs):  # our own work on a miss: storage, identity, decision
            start = time.perf_counter()
            try:
                return on_miss(self, *args, **kwargs)
            finally:
                miss_ms.append((time.perf_counter() - start) * 1e3)

        tdl.Autotuner._on_miss = timed_miss
        parts: dict[str, float] = {}

        def timed_part(owner, attr, label):
            original = getattr(owner, attr)

            def wrapper(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    parts[label] = parts.get(label, 0.0) + (time.perf_counter() - start) * 1e3

            setattr(owner, attr, wrapper)

        from triton_dejavu_like import _compat
        from triton_dejavu_like import store as storage
        from triton_dejavu_like.store import identity

        timed_part(identity, "detect_platform", "platform")
        timed_part(tdl.Autotuner, "kernel_identity", "identity")
        timed_part(storage.CacheFile, "load", "load")
        timed_part(_compat, "launch_option_defaults", "backend defaults")
        tuner = tdl.autotune(key=case.key, configs=case.configs)(case.kernel)
        ms = _first_call_ms(lambda: case.launch(tuner, inputs))
        entries = json.loads(tuner.cache_path().read_text())["entries"]
        return {
            "ms": ms,
            "best": _config_dict(tuner.best_config),
            "decision": tuner.last_decision,
            "benchmark_calls": len(benchmark_calls),
            "phases_s": next(iter(entries.values())).get("phases_s"),
            "miss_ms": sum(miss_ms),
            "miss_parts_ms": parts,
        }
    if name == "plain-first":
        config = next(c for c in case.configs if _config_dict(c) == extra["config"])
        ms = _first_call_ms(lambda: case.launch(case.kernel, inputs, **case.fixed_meta(config)))
        return {"ms": ms}
    if name == "careful":
        policy = tdl.TimingPolicy(final_warmup_ms=25, final_ms=300, final_margin=0)  # every round
        bencher = tdl_bench.GpuBenchmarker(None, None, False, policy)
        calls = [lambda c=c: case.launch(case.kernel, inputs, **case.fixed_meta(c)) for c in case.configs]
        valid, medians = [], []
        for config, call in zip(case.configs, calls):
            try:
                call()
                torch.cuda.synchronize()
                valid.append((config, call))
            except Exception:  # configs that cannot run on this GPU
                continue
        timings = bencher.refine([call for _, call in valid])
        medians = [(t[0], _config_dict(c)) for (c, _), t in zip(valid, timings)]
        return {"medians": medians}
    raise ValueError(name)


def spawn(name: str, case: str, env: dict, extra: dict | None = None) -> dict:
    cmd = [sys.executable, __file__, "--role", name, "--cases", case, "--extra", json.dumps(extra or {})]
    result = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure_case(case: str, work: Path, repeats: int, variants: list[str] | None = None) -> dict:
    up_cache, our_cache, storage = work / f"{case}-up", work / f"{case}-ours", work / f"{case}-store"
    up_env = {"TRITON_CACHE_DIR": str(up_cache)}
    our_env = {
        "TRITON_CACHE_DIR": str(our_cache),
        "TRITON_DEJAVU_STORAGE": str(storage),
        "TRITON_DEJAVU_PROGRESS": "0",
    }
    out: dict = {"case": case}
    out["upstream_tune"] = spawn("upstream-tune", case, up_env)
    out["upstream_restore"] = spawn("upstream-restore", case, up_env)
    out["ours_tune"] = spawn("ours-tune", case, our_env)
    out["variants"] = {}
    for variant in variants or []:  # NAME=VALUE environment settings, each tuned cold in its own dirs
        name, _, value = variant.partition("=")
        cold = {
            **our_env,
            "TRITON_CACHE_DIR": str(work / f"{case}-{name}-{value}"),
            "TRITON_DEJAVU_STORAGE": str(work / f"{case}-{name}-{value}-store"),
            name: value,
        }
        out["variants"][variant] = spawn("ours-tune", case, cold)
    restores, plains = [], []
    for _ in range(repeats):  # fresh processes, interleaved: the first call varies by tens of ms
        restores.append(spawn("ours-restore", case, our_env))
        plains.append(spawn("plain-first", case, our_env, {"config": out["ours_tune"]["best"]}))
    out["ours_restore"] = {
        "ms": statistics.median(r["ms"] for r in restores),
        "miss_ms": statistics.median(r["miss_ms"] for r in restores),
        "decision": ",".join(sorted({r["decision"] for r in restores})),
        "benchmark_calls": sum(r["benchmark_calls"] for r in restores),
        "runs": len(restores),
        "miss_parts_ms": {
            k: statistics.median(r["miss_parts_ms"].get(k, 0.0) for r in restores)
            for k in restores[0]["miss_parts_ms"]
        },
    }
    out["plain_first"] = {"ms": statistics.median(p["ms"] for p in plains)}
    out["careful"] = spawn("careful", case, our_env)
    return out


def report(results: list[dict]) -> str:
    import torch
    import triton

    lines = [
        f"GPU: {torch.cuda.get_device_name()}, triton {triton.__version__}, torch {torch.__version__}, "
        f"{time.strftime('%Y-%m-%d')}",
        "",
        "| case | upstream tune (cold) | ours tune (cold) | speed-up | upstream pick vs best "
        "| ours pick vs best | restore: upstream | restore: ours | plain jit first call | ours - plain "
        "| our own work in it | ours restore benchmarks |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        medians = {json.dumps(c, sort_keys=True): t for t, c in r["careful"]["medians"]}
        best = min(medians.values())

        def pick(config, medians=medians, best=best):
            t = medians.get(json.dumps(config, sort_keys=True))
            return f"+{(t / best - 1) * 100:.1f}%" if t is not None else "n/a"

        up, ours = r["upstream_tune"], r["ours_tune"]
        up_restore, restore, plain = r["upstream_restore"], r["ours_restore"], r["plain_first"]
        cells = [
            r["case"],
            f"{up['ms'] / 1e3:.2f} s",
            f"{ours['ms'] / 1e3:.2f} s",
            f"{up['ms'] / ours['ms']:.1f}x",
            pick(up["best"]),
            pick(ours["best"]),
            f"{up_restore['ms']:.1f} ms" + ("" if up["cache_results"] else " (no cache_results)"),
            f"{restore['ms']:.1f} ms ({restore['decision']})",
            f"{plain['ms']:.1f} ms",
            f"{restore['ms'] - plain['ms']:+.1f} ms",
            f"{restore['miss_ms']:.1f} ms",
            f"{restore['benchmark_calls']} (in {restore['runs']} processes)",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["matmul", "rmsnorm"])
    parser.add_argument("--role")
    parser.add_argument("--extra", default="{}")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per first-call measurement")
    parser.add_argument(
        "--variants",
        nargs="*",
        default=[],
        metavar="VAR=VALUE",
        help="also tune ours cold with these environment settings (e.g. TRITON_DEJAVU_COMPILE_PROCESSES=off)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.role:
        print(json.dumps(role(args.role, args.cases[0], json.loads(args.extra))))
        return
    from gpu_cases import require_gpu

    require_gpu()
    with tempfile.TemporaryDirectory(prefix="tdl-tuning-") as work:
        results = [measure_case(case, Path(work), args.repeats, args.variants) for case in args.cases]
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(report(results))
    for r in results:
        print(f"{r['case']}: our tuning phases (s): {r['ours_tune']['phases_s']}")
        for variant, v in r["variants"].items():
            print(
                f"{r['case']}: ours with {variant}: {v['ms'] / 1e3:.2f} s "
                f"({r['upstream_tune']['ms'] / v['ms']:.1f}x upstream), best {v['best']}, "
                f"phases {v['phases_s']}"
            )
        parts = ", ".join(f"{k} {v:.1f}" for k, v in r["ours_restore"]["miss_parts_ms"].items())
        print(f"{r['case']}: our work on the restoring first call (ms, medians): {parts}")


if __name__ == "__main__":
    main()
