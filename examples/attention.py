"""Attention forward, softmax(Q K^T * scale) V, causal or not, in one pass over the keys.

Each program holds BLOCK_M queries of one head and streams the keys and values in blocks of BLOCK_N,
keeping a running row maximum and sum (online softmax), so the score matrix is never stored. The
tuning key is the sequence length, the head dimension and whether the mask is causal; the space
crosses both block sizes, num_warps and num_stages under a kwarg condition and a config condition.

    python examples/attention.py [--size tiny|full] [--dtype float16|bfloat16|float32]
"""

from __future__ import annotations

import math
import sys

import _common as common  # first: it picks the GPU or the interpreter before triton is imported
import torch
import triton
import triton.language as tl

import triton_dejavu_like as tdl

ON_GPU, DEVICE = common.ON_GPU, common.DEVICE

SIZES = {
    "tiny": {"batch": 1, "heads": 2, "seq": 40, "head_dim": 16, "causal": True},
    "full": {"batch": 4, "heads": 16, "seq": 2048, "head_dim": 64, "causal": True},
}
#: Scale-relative error allowed per element type (tl.dot takes fp32 inputs as TF32 on GPUs).
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 3e-2, torch.float32: 1e-2}
LOG2_E = 1.4426950408889634


def wide_query_block(kwargs: dict[str, int]) -> bool:
    """A key block no longer than the query block keeps the causal diagonal within one step."""
    return kwargs["BLOCK_N"] <= kwargs["BLOCK_M"]


if ON_GPU:
    SPACE = tdl.ConfigSpace(
        {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64]},
        kwarg_conditions=[wide_query_block],
        conditions=[lambda c: c.num_warps == (8 if c.kwargs["BLOCK_M"] == 128 else 4)],
        num_warps=[4, 8],
        num_stages=[2, 3],
    )
else:
    SPACE = tdl.ConfigSpace(
        {"BLOCK_M": [16, 32], "BLOCK_N": [16, 32]},
        kwarg_conditions=[wide_query_block],
        num_warps=[4],
        num_stages=[2],
    )


@tdl.autotune(key=["seq_len", "HEAD_DIM", "CAUSAL"], config_space=SPACE)
@triton.jit
def attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    qk_scale,
    seq_len,
    stride_head,
    stride_seq,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    block_m = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)  # batch and head flattened
    q_rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    base = head * stride_head
    q = tl.load(
        q_ptr + base + q_rows[:, None] * stride_seq + dims[None, :], mask=q_rows[:, None] < seq_len, other=0.0
    )

    # Scores are kept in base 2 (qk_scale includes log2(e)); the running maximum starts at a finite
    # floor so that fully masked entries give exp2(-inf) = 0 rather than NaN.
    row_max = tl.full((BLOCK_M,), -1.0e38, dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    end = tl.minimum((block_m + 1) * BLOCK_M, seq_len) if CAUSAL else seq_len
    for start in range(0, end, BLOCK_N):
        k_rows = start + tl.arange(0, BLOCK_N)
        k_t = tl.load(
            k_ptr + base + k_rows[None, :] * stride_seq + dims[:, None],
            mask=k_rows[None, :] < seq_len,
            other=0.0,
        )
        scores = tl.dot(q, k_t) * qk_scale
        visible = k_rows[None, :] < seq_len
        if CAUSAL:
            visible = visible & (k_rows[None, :] <= q_rows[:, None])
        scores = tl.where(visible, scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        p = tl.exp2(scores - new_max[:, None])
        rescale = tl.exp2(row_max - new_max)
        row_sum = row_sum * rescale + tl.sum(p, axis=1)
        v = tl.load(
            v_ptr + base + k_rows[:, None] * stride_seq + dims[None, :],
            mask=k_rows[:, None] < seq_len,
            other=0.0,
        )
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        row_max = new_max
    out = acc / row_sum[:, None]
    o = o_ptr + base + q_rows[:, None] * stride_seq + dims[None, :]
    tl.store(o, out.to(o_ptr.dtype.element_ty), mask=q_rows[:, None] < seq_len)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Scaled dot-product attention of contiguous (batch, heads, seq, head_dim) tensors."""
    if not (q.shape == k.shape == v.shape) or q.ndim != 4:
        raise ValueError("q, k and v must have one (batch, heads, seq, head_dim) shape")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, heads, seq_len, head_dim = q.shape
    o = torch.empty_like(q)
    qk_scale = LOG2_E / math.sqrt(head_dim)

    def grid(meta: dict[str, int]) -> tuple[int, int]:
        return (triton.cdiv(seq_len, meta["BLOCK_M"]), batch * heads)

    attention_kernel[grid](
        q, k, v, o, qk_scale, seq_len, q.stride(1), q.stride(2), HEAD_DIM=head_dim, CAUSAL=causal
    )
    return o


def run(size: str = "tiny", dtype: torch.dtype = torch.float32) -> common.ExampleResult:
    """Attention of random inputs against ``torch.nn.functional.scaled_dot_product_attention``."""
    shape = SIZES[size]
    gen = common.generator()
    dims = (shape["batch"], shape["heads"], shape["seq"], shape["head_dim"])
    q, k, v = (torch.randn(dims, device=DEVICE, dtype=dtype, generator=gen) for _ in range(3))
    causal = shape["causal"]
    return common.evaluate(
        "attention",
        attention_kernel,
        lambda: attention(q, k, v, causal),
        lambda: torch.nn.functional.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), is_causal=causal
        ),
        tolerance=TOLERANCE[dtype],
        problem=shape,
        dtype=dtype,
    )


if __name__ == "__main__":
    sys.exit(common.main(run, __doc__))
