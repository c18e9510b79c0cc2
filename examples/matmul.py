"""Tiled matrix multiplication C = A @ B, tuned over a ConfigSpace and keyed on M, N and K.

The space crosses tile sizes (BLOCK_M, BLOCK_N, BLOCK_K), the launch order (GROUP_M), num_warps and
num_stages; a kwarg condition and a config condition drop combinations not worth timing. The
first run on a machine tunes; every later process restores the winner from storage.

    python examples/matmul.py [--size tiny|full] [--dtype float16|bfloat16|float32]
"""

from __future__ import annotations

import sys

import _common as common  # first: it picks the GPU or the interpreter before triton is imported
import torch
import triton
import triton.language as tl

import triton_dejavu_like as tdl

ON_GPU, DEVICE = common.ON_GPU, common.DEVICE

SIZES = {
    "tiny": {"M": 40, "N": 32, "K": 24},  # not multiples of the tiles: the masks are exercised
    "full": {"M": 2048, "N": 2048, "K": 2048},
}
#: Scale-relative error allowed per element type (tl.dot takes fp32 inputs as TF32 on GPUs).
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 3e-2, torch.float32: 1e-2}


if ON_GPU:
    SPACE = tdl.ConfigSpace(
        {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [32, 64], "GROUP_M": [8]},
        # a 64x64 tile leaves an H100's tensor cores idle; 8 warps pay off only on 128x128 tiles
        kwarg_conditions=[lambda kw: kw["BLOCK_M"] * kw["BLOCK_N"] > 64 * 64],
        conditions=[lambda c: c.num_warps == 4 or c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] == 128 * 128],
        num_warps=[4, 8],
        num_stages=[3, 4],
    )
else:  # the interpreter ignores num_warps/num_stages: only the tiles change the work done
    SPACE = tdl.ConfigSpace(
        {"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "BLOCK_K": [16], "GROUP_M": [1, 2]},
        kwarg_conditions=[lambda kw: kw["BLOCK_M"] * kw["BLOCK_N"] <= 512],
        num_warps=[4],
        num_stages=[2],
    )


@tdl.autotune(key=["M", "N", "K"], config_space=SPACE)
@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Programs walk the output in groups of GROUP_M tile rows, so neighbours share tiles of B in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % group_rows
    tile_n = (pid % per_group) // group_rows

    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_tile = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_tile, mask=(rows[:, None] < M) & (ks[None, :] + k0 < K), other=0.0)
        b = tl.load(b_tile, mask=(ks[:, None] + k0 < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    c = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for 2-D tensors of one floating dtype, accumulated in fp32."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)

    def grid(meta: dict[str, int]) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    matmul_kernel[grid](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)
    )
    return c


def run(size: str = "tiny", dtype: torch.dtype = torch.float32) -> common.ExampleResult:
    """Multiply random matrices of the chosen size and compare with ``torch.matmul``."""
    shape = SIZES[size]
    gen = common.generator()
    a = torch.randn((shape["M"], shape["K"]), device=DEVICE, dtype=dtype, generator=gen)
    b = torch.randn((shape["K"], shape["N"]), device=DEVICE, dtype=dtype, generator=gen)
    return common.evaluate(
        "matmul",
        matmul_kernel,
        lambda: matmul(a, b),
        lambda: a.float() @ b.float(),
        tolerance=TOLERANCE[dtype],
        problem=shape,
        dtype=dtype,
    )


if __name__ == "__main__":
    sys.exit(common.main(run, __doc__))
