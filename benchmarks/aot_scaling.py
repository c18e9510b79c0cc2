"""Ahead-of-time tuning over 1 and 2 GPUs, on Ray, and with a worker killed (the multi-GPU issue).

    python benchmarks/aot_scaling.py            # a GPU host with 2+ GPUs: 32 matmul shapes
    python benchmarks/aot_scaling.py --cases wide_scaling_cases     # 96 shapes
    python benchmarks/aot_scaling.py --tiny     # here: the interpreter on the CPU, --workers 1 / 2

Each run tunes examples/aot_spec.py into a fresh store and a fresh Triton cache and reports the
wall time, the speed-up over one worker, that every case is stored exactly once, and a serving
process that restores every case with zero tuning. Then the same through a local Ray cluster
(`ray start --head`), and a run where one worker process is killed mid-run followed by a re-run.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from triton_dejavu_like.store import inventory  # noqa: E402

SERVE = """
import sys
from triton_dejavu_like.tools.aot.case import load_cases
from triton_dejavu_like.tools.aot.run import run_case
from triton_dejavu_like import _env
results = [run_case(c, _env.storage_roots()[0]) for c in load_cases(sys.argv[1])]
print({s: sum(r.status == s for r in results) for s in ("tuned", "stored", "failed")})
"""


def env_for(tmp: Path, tiny: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = str(tmp / "triton-cache")
    env["TRITON_DEJAVU_PROGRESS"] = "0"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "examples"), env.get("PYTHONPATH", "")])
    if tiny:
        env["TRITON_INTERPRET"] = "1"
    return env


def tune(
    spec: str, root: Path, where: list[str], env: dict[str, str], timeout: float | None = None
) -> tuple[float, dict, int]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "triton_dejavu_like", "tune", spec, "--root", str(root), *where, "--json"],
            env=env,
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:  # show what it was doing
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)
        print(f"tune {' '.join(where)} timed out after {timeout} s; stderr tail:\n{err[-3000:]}", flush=True)
        return time.perf_counter() - start, {"counts": {}, "error": "timeout"}, 124
    wall = time.perf_counter() - start
    out = proc.stdout
    report = (
        json.loads(out[out.index("{\n") :]) if "{\n" in out else {"counts": {}, "error": proc.stderr[-2000:]}
    )
    return wall, report, proc.returncode


def entries(root: Path) -> tuple[int, int]:
    files, _ = inventory.read_sources([root])
    keys = [(f.identity_id, k) for f in files for k in f.entries]
    return len(keys), len(set(keys))


def serve(spec: str, root: Path, env: dict[str, str]) -> str:
    env = {**env, "TRITON_DEJAVU_STORAGE": str(root)}
    proc = subprocess.run(
        [sys.executable, "-c", SERVE, spec], env=env, capture_output=True, text=True, cwd=REPO
    )
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]


def killed_run(spec: str, root: Path, where: list[str], env: dict[str, str]) -> str:
    """Start a 2-worker run, SIGKILL one worker after the first finished case, then re-run."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "triton_dejavu_like", "tune", spec, "--root", str(root), *where],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[1/"):
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            if children:
                os.kill(int(children[0]), signal.SIGKILL)
            break
    lines += proc.stdout.readlines()
    status = proc.wait()
    summary = next((ln.strip() for ln in lines if re.match(r"\d+ case\(s\) in", ln)), "?")
    _, rerun, rerun_status = tune(spec, root, where, env)
    return f"killed: exit {status}, {summary}; re-run: exit {rerun_status}, {rerun['counts']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="CPU: the interpreter, tiny shapes, --workers")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument(
        "--cases",
        default="scaling_cases",
        help="the function of examples/aot_spec.py (scaling_cases: 32 shapes, wide_scaling_cases: 96)",
    )
    parser.add_argument("--ray-only", action="store_true", help="only the Ray row")
    parser.add_argument("--baseline", type=float, help="1-worker wall time (s) for --ray-only's speed-up")
    parser.add_argument("--timeout", type=float, help="seconds per tune run (default: none)")
    args = parser.parse_args()
    spec = str(REPO / "examples" / f"aot_spec.py:{'tiny_cases' if args.tiny else args.cases}")
    kill_spec = str(REPO / "examples" / f"aot_spec.py:{'tiny_cases' if args.tiny else 'scaling_cases'}")
    one, two = (["--workers", "1"], ["--workers", "2"]) if args.tiny else (["--gpus", "0"], ["--gpus", "0,1"])
    rows: list[list[str]] = []
    base: list[float] = []

    def measure(name: str, where: list[str], run_dir: Path) -> None:
        env = env_for(run_dir, args.tiny)
        wall, report, status = tune(spec, run_dir / "store", where, env, args.timeout)
        base.append(base[0] if base else (args.baseline or wall))
        total, distinct = entries(run_dir / "store")
        cases = sum(report.get("counts", {}).values())
        once = "yes" if total == distinct == cases else f"no ({total} entries, {distinct} keys)"
        row = [name, f"{wall:.1f}", f"{base[0] / wall:.2f}x", str(status), str(report.get("counts")), once]
        rows.append([*row, serve(spec, run_dir / "store", env)])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
        busy: dict[str, list[float]] = {}
        for case in report.get("cases", []):
            busy.setdefault(str(case.get("worker")), []).append(float(case.get("seconds", 0.0)))
        for worker, seconds in sorted(busy.items()):  # the first case also pays the compiles
            total = sum(seconds)
            print(f"    {worker}: {len(seconds)} cases, {total:.1f} s in cases, first {seconds[0]:.1f} s")

    with tempfile.TemporaryDirectory(prefix="aot-scaling-") as tmp_text:
        tmp = Path(tmp_text)
        print("| mode | wall s | speed-up | exit | cases | each stored once | serving process |", flush=True)
        print("| --- | --- | --- | --- | --- | --- | --- |", flush=True)
        if not args.ray_only:
            measure("1 worker", one, tmp / "run1")
            measure("2 workers", two, tmp / "run2")
            killed = killed_run(kill_spec, tmp / "kill" / "store", two, env_for(tmp / "kill", args.tiny))
            print(f"\nkill test (2 workers, one SIGKILLed after the first case): {killed}", flush=True)
        if not args.no_ray:  # last: a local Ray cluster (started here, stopped at the end)
            head = ["ray", "start", "--head", "--num-gpus", "2", "--include-dashboard=false"]
            head.append("--disable-usage-stats")
            try:
                t0 = time.perf_counter()
                started = subprocess.run(head, capture_output=True, timeout=90)
                took = time.perf_counter() - t0
                print(f"ray start --head: exit {started.returncode} in {took:.1f} s", flush=True)
            except (OSError, subprocess.TimeoutExpired) as exc:
                print(f"ray start failed: {exc}", flush=True)
                return 1
            try:
                if started.returncode == 0:
                    measure("ray (local cluster)", ["--ray", "auto"], tmp / "ray")
                else:
                    print(f"ray start failed: {started.stderr.decode()[-500:]}", flush=True)
            finally:
                subprocess.run(["ray", "stop", "--force"], capture_output=True, timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
