"""Every script of ``benchmarks/`` still starts as benchmarks/README.md runs it: its ``--help``, and
each mode that needs no GPU and ends in seconds (a stub kernel, the interpreter, a replay of the
measured spaces) prints what its docstring promises; a GPU-only script says that it needs a GPU.

The scripts run on a GPU rarely, so a change of the package that breaks one is seen here first.
One driver process imports torch and Triton once and forks a copy per script run (a fresh
interpreter per run would import torch each time, seconds on a 2-core machine)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import script_env

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if not BENCHMARKS.is_dir():  # the GPU test image copies tests/ and examples/, not benchmarks/
    pytest.skip(f"no {BENCHMARKS} in this tree", allow_module_level=True)

SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if 'if __name__ == "__main__"' in p.read_text())
SMALL_SPACE = "rmsnorm_NVIDIA_H100_80GB_HBM3"

#: Runs each script as ``python benchmarks/NAME ARGS...`` would, in a forked copy of one process
#: that imported torch and Triton already: output to files, its own storage root, exit status kept.
DRIVER = r"""
import json, os, runpy, signal, sys, time, traceback
import torch, triton, triton_dejavu_like  # noqa: F401  (imported once, before the forks)

def run(script, argv, folder):
    os.setpgrp()
    for fd, name in ((1, "stdout"), (2, "stderr")):
        os.dup2(os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    os.environ["TRITON_DEJAVU_STORAGE"] = os.path.join(folder, "storage")
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (stop.code is not None)
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)

results = {}
for name, script, argv, folder, timeout in json.loads(sys.argv[1]):
    os.makedirs(folder, exist_ok=True)
    pid = os.fork()
    if pid == 0:
        run(script, argv, folder)
    deadline = time.monotonic() + timeout
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.killpg(pid, signal.SIGKILL)
        done = os.waitpid(pid, 0)
    results[name] = {"rc": os.waitstatus_to_exitcode(done[1])}
    for part in ("stdout", "stderr"):
        results[name][part] = open(os.path.join(folder, part)).read()
print(json.dumps(results))
"""


def run_all(tmp: Path, runs: dict[str, tuple[str, str]], timeout_s: int) -> dict[str, dict]:
    """``runs``: name -> (script, its arguments); ``{out}`` in them is the run's own empty folder."""
    cases = []
    for name, (script, argv) in runs.items():
        folder = tmp / re.sub(r"\W+", "_", name)
        cases.append(
            (name, str(BENCHMARKS / script), argv.format(out=folder).split(), str(folder), timeout_s)
        )
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(cases)],
        env=script_env(tmp, TRITON_INTERPRET="1", TRITON_DEJAVU_PROGRESS="0"),
        capture_output=True,
        text=True,
        timeout=timeout_s * len(cases) + 120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def helps(tmp_path_factory) -> dict[str, dict]:
    runs = {script: (script, "--help") for script in SCRIPTS}
    return run_all(tmp_path_factory.mktemp("help"), runs, timeout_s=60)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_shows_its_help(helps, script):
    run = helps[script]
    assert run["rc"] == 0, run["stderr"][-4000:]
    assert run["stdout"].startswith(f"usage: {script}")
    summary = (BENCHMARKS / script).read_text().split('"""')[1].splitlines()[0]
    assert " ".join(summary.split()) in " ".join(run["stdout"].split())  # the docstring's first line


def _rows(*cells: str):
    """A check that the output holds a markdown row beginning with ``cells``."""
    return lambda out: f"| {' | '.join(cells)} |" in out


#: name -> (script, its arguments, what its standard output must show)
MODES = {
    "hot_path --stub": (
        "hot_path.py",
        "--stub --iters 20 --repeats 1",
        _rows("vector add (1024)", "triton_dejavu_like.autotune (hit)"),
    ),
    "nearest_key": ("nearest_key.py", "--keys 50 --misses 10", lambda out: "same choice: True" in out),
    "storage_io": (
        "storage_io.py",
        "--keys 10 --repeat 1",
        lambda out: re.search(r"^ +10 +[\d.]+ +[\d.]+ +1\.0 ", out, re.M),
    ),
    "storage_stress": (
        "storage_stress.py",
        "--writers 2 --rounds 1 --per-round 3 --kills 2 --readers 1",
        lambda out: re.search(r"^ *entries found +6$", out, re.M) and re.search(r"^ *lost +0$", out, re.M),
    ),
    "sub_spaces --small": (
        "sub_spaces.py",
        "--small --out {out}/sub",
        lambda out: len(re.findall(r"^convolution_\S+\.json\.gz: \d+ candidates$", out, re.M)) == 16,
    ),
    "adaptive_replay --set --bo": (
        "adaptive_replay.py",
        f"--seeds 1 --spaces {SMALL_SPACE} --set PATIENCE_MIN=24 --bo refit_batch_share=0.25",
        lambda out: (
            "overrides {'PATIENCE_MIN': 24}, BOSettings {'refit_batch_share': 0.25}" in out
            and _rows(SMALL_SPACE)(out)
        ),
    ),
    "warm_start_budget": (
        "warm_start_budget.py",
        f"--seeds 1 --spaces {SMALL_SPACE}",
        lambda out: _rows(SMALL_SPACE, "near")(out) and _rows(SMALL_SPACE, "far")(out),
    ),
    "design_spread": ("design_spread.py", "--seeds 1", _rows(SMALL_SPACE, "8")),
    "config_space_scale": (
        "config_space_scale.py",
        "--sizes 10000 --conditions none",
        lambda out: re.search(r"^ +10000 +none +this tree .* \d+$", out, re.M),
    ),
    "measure_space --tiny": (
        "measure_space.py",
        "--tiny --case rmsnorm --jobs 1 --repeats 5 --out-dir {out}",
        lambda out: "rmsnorm_CPU_Triton_interpreter.json.gz: loads in search_replay" in out,
    ),
    "large_space --tiny": (
        "large_space.py",
        "--tiny --shapes 8x32x16 --strategies exhaustive --no-careful --upstream-sample 0 --compile-sample 0"
        " --out {out}/large_space.json",
        _rows("8x32x16", "exhaustive", "1"),
    ),
    "single_flight --tiny": (
        "single_flight.py",
        "--tiny --processes 2",
        lambda out: re.search(r"^\| 2 processes, single flight \|[^|]+\|[^|]+\|[^|]+\| 1 \|", out, re.M),
    ),
}

#: Modes that tune with Bayesian optimisation: they need the bo extra (SMAC).
NEEDS_SMAC = {"adaptive_replay --set --bo", "warm_start_budget"}
HAS_SMAC = importlib.util.find_spec("smac") is not None

#: Scripts that time CUDA kernels, with the arguments of their shortest run.
GPU_ONLY = {
    "careful_agreement.py": "--processes 1 --repeats 1",
    "compile_scaling.py": "--threads 1",
    "compile_stages.py": "--n 1",
    "first_call_profile.py": "",
    "first_timing.py": "--runs 1",
    "hot_path.py": "--iters 1 --repeats 1",
    "round_order.py": "--rounds 1",
    "tuning_time.py": "--repeats 1",
}


@pytest.fixture(scope="module")
def modes(tmp_path_factory) -> dict[str, dict]:
    import torch

    runs = {
        name: (script, argv)
        for name, (script, argv, _) in MODES.items()
        if HAS_SMAC or name not in NEEDS_SMAC
    }
    if not torch.cuda.is_available():
        runs.update({f"{script} without a GPU": (script, argv) for script, argv in GPU_ONLY.items()})
    return run_all(tmp_path_factory.mktemp("modes"), runs, timeout_s=120)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODES)
def test_a_gpu_free_mode_runs_to_its_report(modes, name):
    if name not in modes:
        pytest.skip("needs the bo extra (SMAC)")
    run, shows = modes[name], MODES[name][2]
    assert run["rc"] == 0, run["stderr"][-4000:]
    assert shows(run["stdout"]), run["stdout"][-4000:]


@pytest.mark.slow
@pytest.mark.parametrize("script", GPU_ONLY)
def test_a_gpu_only_script_says_it_needs_a_gpu(modes, script):
    name = f"{script} without a GPU"
    if name not in modes:
        pytest.skip("a GPU is present: the script would time it")
    run = modes[name]
    assert run["rc"] == 1 and "needs a GPU" in run["stdout"] + run["stderr"], run["stderr"][-4000:]
