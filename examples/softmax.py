"""Row softmax for rows of any length, keyed on the row length.

Each program streams its row in chunks of BLOCK_N twice: once to find the maximum and the sum of
exponentials (online, rescaling the running sum when the maximum grows), once to write the result.
The chunk size, num_warps and num_stages are tuned.

    python examples/softmax.py [--size tiny|full] [--dtype float16|bfloat16|float32]
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
    "tiny": {"rows": 6, "cols": 100},
    "full": {"rows": 4096, "cols": 8192},
}
TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}

if ON_GPU:
    SPACE = tdl.ConfigSpace({"BLOCK_N": [1024, 2048, 4096]}, num_warps=[4, 8], num_stages=[2])
else:
    SPACE = tdl.ConfigSpace({"BLOCK_N": [32, 64, 128]}, num_warps=[4], num_stages=[2])


@tdl.autotune(key=["n_cols"], config_space=SPACE)
@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    # Per-lane running maximum and sum of exp(x - maximum). The maximum starts at a finite floor, so
    # lanes past the row end (x = -inf) add exp(-inf) = 0 and never compute -inf - (-inf).
    lane_max = tl.full((BLOCK_N,), -1.0e38, dtype=tl.float32)
    lane_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(lane_max, x)
        lane_sum = lane_sum * tl.exp(lane_max - new_max) + tl.exp(x - new_max)
        lane_max = new_max
    row_max = tl.max(lane_max, axis=0)
    row_sum = tl.sum(lane_sum * tl.exp(lane_max - row_max), axis=0)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(y_row + cols, (tl.exp(x - row_max) / row_sum).to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor with contiguous rows."""
    if x.ndim != 2 or x.stride(1) != 1:
        raise ValueError("x must be a 2-D tensor with contiguous rows")
    y = torch.empty_like(x)
    n_rows, n_cols = x.shape
    softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0))
    return y


def run(size: str = "tiny", dtype: torch.dtype = torch.float32) -> common.ExampleResult:
    """Softmax of random rows (scaled so that exponentials span a wide range) against torch."""
    shape = SIZES[size]
    gen = common.generator()
    x = 4 * torch.randn((shape["rows"], shape["cols"]), device=DEVICE, dtype=torch.float32, generator=gen)
    x = x.to(dtype)
    return common.evaluate(
        "softmax",
        softmax_kernel,
        lambda: softmax(x),
        lambda: torch.softmax(x.float(), dim=-1),
        tolerance=TOLERANCE[dtype],
        problem=shape,
        dtype=dtype,
    )


if __name__ == "__main__":
    sys.exit(common.main(run, __doc__))
