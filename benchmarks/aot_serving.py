"""Ahead-of-time tuning for serving: tune many matmul shapes once; a server process restores them all.

Step 1 (one fresh process, empty storage and Triton cache): every shape is tuned through the
decorator (the first call of ``examples/matmul.py``'s kernel for that shape), one after the other;
the wall time of each first call and of the whole step are recorded. Step 2 (a fresh process on the
same storage, the Triton cache of step 1 kept, as a deployment would ship it): every shape is
launched once more; the decision of each call must be ``restored`` and the launches beyond the
script's own (benchmark launches, counted by wrapping the jitted function's ``run``) must be 0.
``python -m triton_dejavu_like list`` then counts the stored keys.

Step 1 is a function of its own (``TUNERS``: only the decorator's first calls so far; another tuner
added there is chosen with ``--tuner``, leaving step 2 unchanged). ``aot_scaling.py`` and
``serving_readonly.py`` measure ``python -m triton_dejavu_like tune`` itself.

    python benchmarks/aot_serving.py --out aot.json          # GPU: 24 LLM-serving shapes
    python benchmarks/aot_serving.py --tiny --out /tmp/aot.json   # interpreter, CPU tensors
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = ROOT / "examples"
Json = dict[str, Any]
Shape = tuple[int, int, int]

#: Decode and prefill token counts against the projections of a 7-8B model (M x N x K).
GPU_SHAPES: list[Shape] = [
    (m, n, k)
    for m in (1, 16, 64, 256, 1024, 4096)
    for n, k in ((4096, 4096), (12288, 4096), (4096, 11008), (22016, 4096))
]
TINY_SHAPES: list[Shape] = [
    (m, n, k) for m in (1, 2, 3, 5, 8) for n, k in ((16, 16), (32, 16), (16, 32), (24, 16))
]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- in a role process ---------------------------------------------------------------------------------


def _matmul_module() -> Any:
    sys.path.insert(0, str(EXAMPLES))
    import _common  # noqa: F401  (first: picks the GPU or the interpreter)
    import matmul

    return matmul


def role_serve(shapes: list[Shape]) -> Json:
    """Launch every shape once (tuning or restoring), timing each first call and counting launches."""
    import torch

    matmul = _matmul_module()
    kernel = matmul.matmul_kernel
    gpu = matmul.ON_GPU
    device, dtype = ("cuda", torch.float16) if gpu else ("cpu", torch.float32)
    jitted = kernel.fn
    original = jitted.run
    launched = [0]

    def counting_run(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("warmup", False):
            launched[0] += 1
        return original(*args, **kwargs)

    jitted.run = counting_run
    per_shape = []
    gen = torch.Generator(device=device).manual_seed(0)
    started = time.perf_counter()
    for m, n, k in shapes:
        a = torch.randn((m, k), device=device, dtype=dtype, generator=gen)
        b = torch.randn((k, n), device=device, dtype=dtype, generator=gen)
        before = launched[0]
        if gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        c = matmul.matmul(a, b)
        if gpu:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        ref = a.float() @ b.float()
        error = float((c.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        per_shape.append(
            {
                "shape": [m, n, k],
                "first_call_s": wall,
                "decision": kernel.last_decision,
                "bench_launches": launched[0] - before - 1,
                "max_error": error,
                "ok": error <= matmul.TOLERANCE[dtype],
                "config": {**kernel.best_config.kwargs, "num_warps": kernel.best_config.num_warps},
            }
        )
    total = time.perf_counter() - started
    return {
        "total_s": total,
        "per_shape": per_shape,
        "space": len(kernel.configs),
        "cache_path": str(kernel.cache_path()),
        "device": torch.cuda.get_device_name() if gpu else "interpreter",
    }


# --- the driver ----------------------------------------------------------------------------------------


def spawn_serve(shapes: list[Shape], env: dict[str, str], timeout_s: float) -> Json:
    cmd = [sys.executable, __file__, "--role", "serve", "--shapes-json", json.dumps(shapes)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"serve failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - started
    return result


def tune_with_decorator(shapes: list[Shape], env: dict[str, str], timeout_s: float) -> Json:
    """Step 1 through the decorator: the first call of each shape tunes it, in one process."""
    return spawn_serve(shapes, env, timeout_s)


#: Ways to run step 1 (``python -m triton_dejavu_like tune`` is measured by aot_scaling.py instead).
TUNERS: dict[str, Callable[[list[Shape], dict[str, str], float], Json]] = {"decorator": tune_with_decorator}


def stored_keys(env: dict[str, str]) -> int:
    proc = subprocess.run(
        [sys.executable, "-m", "triton_dejavu_like", "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return sum(f["keys"] for f in json.loads(proc.stdout)["files"])


def parse_shape(text: str) -> Shape:
    m, n, k = (int(x) for x in text.lower().split("x"))
    return m, n, k


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", nargs="+", type=parse_shape, help="MxNxK ... (default: 24 GPU / 20 tiny)")
    parser.add_argument("--tuner", choices=sorted(TUNERS), default="decorator", help="how step 1 tunes")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--tiny", action="store_true", help="interpreter on CPU tensors, tiny shapes")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per process")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--shapes-json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "serve":
        print(json.dumps(role_serve([tuple(s) for s in json.loads(args.shapes_json)])))
        return 0
    shapes = args.shapes or (TINY_SHAPES if args.tiny else GPU_SHAPES)
    with tempfile.TemporaryDirectory(prefix="tdl-aot-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.lstrip("_").startswith("TRITON_DEJAVU_")}
        env.update(
            TRITON_DEJAVU_STORAGE=str(Path(tmp) / "storage"),
            TRITON_CACHE_DIR=str(Path(tmp) / "triton-cache"),
            TRITON_DEJAVU_PROGRESS="0",
            PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        )
        if args.tiny:
            env["TRITON_INTERPRET"] = "1"
        log(f"step 1: tuning {len(shapes)} shapes in one fresh process ({args.tuner})")
        tuned = TUNERS[args.tuner](shapes, env, args.timeout)
        log(f"step 1: {tuned['total_s']:.1f} s of first calls, process {tuned['process_s']:.1f} s")
        log("step 2: a fresh process restores every shape")
        served = spawn_serve(shapes, env, args.timeout)
        keys = stored_keys(env)
    decisions = [s["decision"] for s in served["per_shape"]]
    launches = sum(s["bench_launches"] for s in served["per_shape"])
    wrong = [s["shape"] for s in tuned["per_shape"] + served["per_shape"] if not s["ok"]]
    tune_each = [s["first_call_s"] for s in tuned["per_shape"]]
    restore_each = [s["first_call_s"] for s in served["per_shape"]]
    problems = []
    if any(d != "restored" for d in decisions):
        problems.append(f"not every shape was restored: {sorted(set(decisions))}")
    if launches:
        problems.append(f"the restoring process made {launches} benchmark launches")
    if wrong:
        problems.append(f"wrong results for {wrong}")
    if keys != len(set(shapes)):
        problems.append(f"{keys} keys stored for {len(set(shapes))} shapes")
    lines = [
        f"{len(shapes)} matmul shapes on {served['device']}, {tuned['space']} configs per shape",
        "",
        "| step | process wall | first calls, total | first call per shape (median, max) | "
        "benchmark launches | decisions |",
        "| --- | ---: | ---: | --- | ---: | --- |",
        f"| 1: tune ({args.tuner}) | {tuned['process_s']:.1f} s | {tuned['total_s']:.2f} s | "
        f"{statistics.median(tune_each) * 1e3:.1f} ms, {max(tune_each) * 1e3:.1f} ms | "
        f"{sum(s['bench_launches'] for s in tuned['per_shape'])} | "
        f"{', '.join(sorted(set(s['decision'] for s in tuned['per_shape'])))} |",
        f"| 2: restore | {served['process_s']:.1f} s | {served['total_s']:.2f} s | "
        f"{statistics.median(restore_each) * 1e3:.1f} ms, {max(restore_each) * 1e3:.1f} ms | {launches} | "
        f"{', '.join(sorted(set(decisions)))} |",
        "",
        f"restore / tune (first calls, total): {served['total_s'] / tuned['total_s']:.3f}; "
        f"stored keys: {keys}",
    ]
    text = "\n".join(lines)
    print(text)
    for message in problems:
        print(f"FAILED: {message}")
    if not problems:
        print("OK: every shape restored with 0 benchmark launches")
    if args.out:
        args.out.write_text(
            json.dumps({"tune": tuned, "restore": served, "stored_keys": keys, "table": text}, indent=1)
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
