"""The kernels and config lists the GPU benchmarks tune: the examples' matmul and RMSNorm kernels.

Each case gives the raw ``@triton.jit`` kernel (so upstream's ``triton.autotune`` and ours wrap the
very same function), the config list, the tuning key, inputs, and a launcher that calls any
autotuner (or the plain kernel with explicit meta-parameters) on those inputs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import _common  # (picks the GPU before triton is imported)
import matmul as matmul_example
import rmsnorm as rmsnorm_example
import torch
import triton


def require_gpu() -> None:
    """Exit with a message on a machine without a GPU (the cases' inputs are CUDA tensors)."""
    if not _common.ON_GPU:
        sys.exit("needs a GPU")


@dataclass
class Case:
    name: str
    kernel: Any  # the raw JITFunction
    configs: list[triton.Config]
    key: list[str]
    make_inputs: Callable[[], tuple[Any, ...]]
    launch: Callable[..., Any]  # launch(kernel_or_tuner, inputs, **meta)

    def fixed_meta(self, config: triton.Config) -> dict[str, Any]:
        """Keyword arguments that launch the plain kernel with ``config`` (no pre_hook)."""
        return dict(config.all_kwargs())


def matmul_case(size: int = 4096) -> Case:
    configs = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s)
        for bm in (64, 128)
        for bn in (64, 128, 256)
        for bk in (32, 64)
        for w in (4, 8)
        for s in (3, 4)
    ]

    def make_inputs():
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn((size, size), device="cuda", dtype=torch.float16, generator=gen)
        b = torch.randn((size, size), device="cuda", dtype=torch.float16, generator=gen)
        return a, b, torch.empty((size, size), device="cuda", dtype=torch.float16)

    def launch(kernel, inputs, **meta):
        a, b, c = inputs
        M, K = a.shape
        N = b.shape[1]

        def grid(m):
            return (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]),)

        return kernel[grid](
            a,
            b,
            c,
            M,
            N,
            K,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            c.stride(0),
            c.stride(1),
            **meta,
        )

    return Case(
        "matmul 4096^3 fp16", matmul_example.matmul_kernel.fn, configs, ["M", "N", "K"], make_inputs, launch
    )


def rmsnorm_case(rows: int = 8192, cols: int = 8192) -> Case:
    configs = [
        rmsnorm_example.make_config(block_n, programs, warps)
        for block_n in (1024, 2048, 4096, 8192)
        for programs in (0, rmsnorm_example.PERSISTENT_PROGRAMS)
        for warps in (4, 8, 16)
    ]

    def make_inputs():
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn((rows, cols), device="cuda", dtype=torch.float16, generator=gen)
        w = torch.randn((cols,), device="cuda", dtype=torch.float16, generator=gen)
        return x, w, torch.empty_like(x), rmsnorm_example.ticket_counter(x.device)

    def launch(kernel, inputs, **meta):
        x, w, y, ticket = inputs
        n_rows, n_cols = x.shape
        if meta.get("PROGRAMS"):
            ticket.zero_()  # what the persistent configs' pre_hook does

        def grid(m):
            return (min(n_rows, m["PROGRAMS"]) if m["PROGRAMS"] else n_rows,)

        return kernel[grid](x, w, y, ticket, n_rows, n_cols, x.stride(0), y.stride(0), 1e-6, **meta)

    return Case(
        f"rmsnorm {rows}x{cols} fp16",
        rmsnorm_example.rmsnorm_kernel.fn,
        configs,
        ["n_cols"],
        make_inputs,
        launch,
    )


CASES: dict[str, Callable[[], Case]] = {"matmul": matmul_case, "rmsnorm": rmsnorm_case}
