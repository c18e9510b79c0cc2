"""Helpers for tests that run scripts in fresh processes and watch processes (Linux: ``/proc``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def script_env(tmp_path: Path, **env_vars: str) -> dict[str, str]:
    """The environment of a script run in a fresh process without Triton's interpreter: this
    repository's package and the tests folder (``gpu_kernels``) first on its path, storage in
    ``tmp_path / "storage"`` and an empty Triton cache in ``tmp_path / "triton-cache"`` unless
    ``env_vars`` say otherwise."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEJAVU_STORAGE"] = str(tmp_path / "storage")
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(REPO / "tests"), env.get("PYTHONPATH")]))
    env.update(env_vars)
    return env


def run_script(
    tmp_path: Path, name: str, source: str, *argv: str, timeout: int = 300, **env_vars: str
) -> dict[str, Any]:
    """Run ``source`` as ``tmp_path / name`` in a fresh process (:func:`script_env`) and return the
    JSON object its last line prints; fails if it exits non-zero."""
    script = tmp_path / name
    script.write_text(source)
    done = subprocess.run(
        [sys.executable, str(script), *argv],
        env=script_env(tmp_path, **env_vars),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def all_exit(pids: Iterable[int], timeout_s: float = 10.0) -> bool:
    """Whether every process of ``pids`` has exited within ``timeout_s``."""
    pids = list(pids)
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
