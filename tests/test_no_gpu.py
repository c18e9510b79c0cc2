"""Without a GPU and without TRITON_INTERPRET, the first launch says what to do (not "0 active drivers")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import torch, triton, triton.language as tl
    import triton_dejavu_like as tdl

    @tdl.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit
    def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)

    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty_like(x)
    try:
        double[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, out, 100)
    except tdl.NoGpuDriverError as exc:
        print("cause:", type(exc.__cause__).__name__, exc.__cause__)
        raise
    """
)


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_has_gpu(), reason="a GPU is present: kernels launch without the interpreter")
def test_a_launch_without_gpu_and_interpreter_says_to_set_triton_interpret(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent), env.get("PYTHONPATH", "")])
    env["TRITON_DEJAVU_STORAGE"] = str(tmp_path / "storage")
    script = tmp_path / "kernel.py"  # triton.jit reads the source of the kernel
    script.write_text(SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("triton_dejavu_like._compat.NoGpuDriverError: double:"), result.stderr
    assert "TRITON_INTERPRET=1" in last and "active drivers" in last
    assert "The above exception was the direct cause" in result.stderr  # Triton's error is kept
    assert result.stdout.startswith("cause: RuntimeError 0 active drivers")
    assert not list(tmp_path.rglob("cache.json"))
