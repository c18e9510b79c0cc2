"""Tune ahead of time, then serve read-only: misses, and how good a nearest-key answer is.

1. ``python -m triton_dejavu_like tune examples/aot_spec.py:scaling_cases`` (32 matmul shapes) into a
   fresh store and a fresh Triton cache (``--gpus all`` on a GPU host): its wall time;
2. a serving process with ``TRITON_DEJAVU_READ_ONLY=1`` launches every tuned shape and a set of
   unseen shapes: how each was answered (restored / nearest / ...), the misses it counted, and
   nothing benchmarked;
3. another process tunes the unseen shapes (tuning on, its own store): the fresh winners.
4. one process times, for each unseen shape, the nearest-key answer's config and the freshly tuned
   config (interleaved, L2 flushed): the ratio says what serving an unseen shape without tuning
   costs.

    python benchmarks/serving_readonly.py            # GPU
    python benchmarks/serving_readonly.py --tiny     # CPU, interpreter (ratios meaningless)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UNSEEN = [(m, n, k) for m in (24, 96, 384, 1536) for n, k in ((4096, 4096), (11008, 4096))]
TINY_UNSEEN = [(28, 32, 24), (36, 16, 16)]

SERVE = r"""
import json, sys
sys.path[:0] = [sys.argv[3], sys.argv[4]]
import _common as common
import torch
import triton_dejavu_like as tdl
from matmul import matmul, matmul_kernel
shapes = json.loads(sys.argv[1])
dtype = getattr(torch, sys.argv[2])
out = []
for m, n, k in shapes:
    a = torch.randn((m, k), device=common.DEVICE, dtype=dtype)
    b = torch.randn((k, n), device=common.DEVICE, dtype=dtype)
    matmul(a, b)
    c = matmul_kernel.best_config
    out.append({"shape": [m, n, k], "decision": matmul_kernel.last_decision,
                "config": {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}})
print(json.dumps({"launches": out, "misses": sum(sum(v.values()) for v in tdl.misses().values())}))
"""

TIME = r"""
import json, sys
sys.path[:0] = [sys.argv[3], sys.argv[4]]
import _common as common
import torch, triton
from matmul import matmul_kernel
pairs = json.loads(sys.argv[1])
dtype = getattr(torch, sys.argv[2])
results = []
for pair in pairs:
    m, n, k = pair["shape"]
    a = torch.randn((m, k), device=common.DEVICE, dtype=dtype)
    b = torch.randn((k, n), device=common.DEVICE, dtype=dtype)
    c = torch.empty((m, n), device=common.DEVICE, dtype=dtype)
    times = {}
    for name in ("nearest", "tuned"):
        cfg = dict(pair[name])
        warps, stages = cfg.pop("num_warps"), cfg.pop("num_stages")
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)
        def call(cfg=cfg, warps=warps, stages=stages):
            matmul_kernel.fn[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                   c.stride(0), c.stride(1), **cfg, num_warps=warps, num_stages=stages)
        if common.DEVICE == "cpu":
            import time as t
            s = t.perf_counter(); call(); times[name] = (t.perf_counter() - s) * 1e3
        else:
            times[name] = triton.testing.do_bench(call, warmup=25, rep=200)
    results.append({**pair, **{f"{k}_ms": v for k, v in times.items()}})
print(json.dumps(results))
"""


def run(cmd: list[str], env: dict[str, str], timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, timeout=timeout)


def last_json(proc: subprocess.CompletedProcess[str]) -> object:
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the interpreter on CPU tensors, tiny shapes")
    parser.add_argument("--gpus", default="all", help="passed to tune --gpus (GPU mode)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "examples"))
    spec = "examples/aot_spec.py:" + ("tiny_cases" if args.tiny else "scaling_cases")
    import aot_spec

    tuned_shapes = [list(s) for s in (aot_spec.TINY_SHAPES if args.tiny else aot_spec.SCALING_SHAPES)]
    unseen = [list(s) for s in (TINY_UNSEEN if args.tiny else UNSEEN)]
    dtype = "float32" if args.tiny else "float16"
    where = [] if args.tiny else ["--gpus", args.gpus]
    with tempfile.TemporaryDirectory(prefix="serving-") as tmp_text:
        tmp = Path(tmp_text)
        env = {**os.environ, "TRITON_CACHE_DIR": str(tmp / "cache"), "TRITON_DEJAVU_PROGRESS": "0"}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        if args.tiny:
            env["TRITON_INTERPRET"] = "1"
        store, fresh = tmp / "store", tmp / "fresh"
        start = time.perf_counter()
        tune = run(
            [sys.executable, "-m", "triton_dejavu_like", "tune", spec, "--root", str(store), *where], env
        )
        tune_s = time.perf_counter() - start
        if tune.returncode != 0:
            print(tune.stdout[-3000:], tune.stderr[-3000:])
            return 1
        paths = [json.dumps(tuned_shapes + unseen), dtype, str(REPO / "examples"), str(REPO)]
        serve_env = {**env, "TRITON_DEJAVU_STORAGE": str(store), "TRITON_DEJAVU_READ_ONLY": "1"}
        served = last_json(run([sys.executable, "-c", SERVE, *paths], serve_env))
        paths[0] = json.dumps(unseen)
        fresh_env = {**env, "TRITON_DEJAVU_STORAGE": str(fresh)}
        tuned = last_json(run([sys.executable, "-c", SERVE, *paths], fresh_env))
        by_shape = {tuple(x["shape"]): x for x in served["launches"]}
        pairs = [
            {"shape": t["shape"], "nearest": by_shape[tuple(t["shape"])]["config"], "tuned": t["config"]}
            for t in tuned["launches"]
        ]
        paths[0] = json.dumps(pairs)
        timed = last_json(run([sys.executable, "-c", TIME, *paths], env))
    decisions: dict[str, int] = {}
    for launch in served["launches"]:
        decisions[launch["decision"]] = decisions.get(launch["decision"], 0) + 1
    print(f"tune: {len(tuned_shapes)} shapes in {tune_s:.1f} s ({' '.join(where) or 'in process'})")
    print(f"read-only serving of {len(tuned_shapes)} tuned + {len(unseen)} unseen shapes: {decisions}")
    print(f"misses counted: {served['misses']}; tuned while serving: {decisions.get('tuned', 0)}")
    print("\n| unseen shape | nearest-key config | ms | freshly tuned config | ms | nearest / tuned |")
    print("| --- | --- | ---: | --- | ---: | ---: |")
    ratios = []
    for r in timed:
        ratio = r["nearest_ms"] / r["tuned_ms"]
        ratios.append(ratio)
        print(
            f"| {'x'.join(map(str, r['shape']))} | {r['nearest']} | {r['nearest_ms']:.4f} | {r['tuned']} "
            f"| {r['tuned_ms']:.4f} | {ratio:.3f} |"
        )
    geo = math.exp(statistics.fmean(math.log(x) for x in ratios))
    print(
        f"\nnearest-key answer / fresh tuning, unseen shapes: geometric mean {geo:.3f}, "
        f"worst {max(ratios):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
