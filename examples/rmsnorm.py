"""RMSNorm forward, y = x / sqrt(mean(x^2) + eps) * w, keyed on the row length; configs carry pre-hooks.

Two kinds of config compete. A plain config launches one program per row. A persistent config
launches a fixed number of programs that take rows from a shared ticket counter (an int32 workspace
kept between calls) until none is left. The counter must be zero when a launch starts: those configs
carry a ``pre_hook`` that zeroes it, and the autotuner runs it before every launch, benchmark runs
and launches after a restore included. Plain configs carry no hook.

A ``fallback_heuristic`` picks a persistent config when tuning is not allowed
(``TRITON_DEJAVU_FORCE_FALLBACK=1`` and nothing stored for the row length).

    python examples/rmsnorm.py [--size tiny|full] [--dtype float16|bfloat16|float32]
"""

from __future__ import annotations

import sys
from typing import Any

import _common as common  # first: it picks the GPU or the interpreter before triton is imported
import torch
import triton
import triton.language as tl

import triton_dejavu_like as tdl

ON_GPU, DEVICE = common.ON_GPU, common.DEVICE

SIZES = {
    "tiny": {"rows": 12, "cols": 80},
    "full": {"rows": 8192, "cols": 4096},
}
TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}
EPS = 1e-6

#: Programs of a persistent launch: a few per SM on a GPU, two under the interpreter.
PERSISTENT_PROGRAMS = 4 * torch.cuda.get_device_properties(0).multi_processor_count if ON_GPU else 2
_tickets: dict[torch.device, torch.Tensor] = {}


def ticket_counter(device: torch.device) -> torch.Tensor:
    """The per-device workspace persistent launches take rows from (allocated once, then reused)."""
    if device not in _tickets:
        _tickets[device] = torch.zeros(1, dtype=torch.int32, device=device)
    return _tickets[device]


def reset_ticket(nargs: dict[str, Any]) -> None:
    """Per-config pre-hook of the persistent configs: rows are handed out from 0 again."""
    nargs["ticket_ptr"].zero_()


def make_config(block_n: int, programs: int, num_warps: int) -> triton.Config:
    """``programs=0``: one program per row, no hook; otherwise a persistent launch with its hook."""
    return triton.Config(
        {"BLOCK_N": block_n, "PROGRAMS": programs},
        num_warps=num_warps,
        pre_hook=reset_ticket if programs else None,
    )


if ON_GPU:
    CONFIGS = [
        make_config(block_n, programs, warps)
        for block_n in (1024, 4096)
        for programs in (0, PERSISTENT_PROGRAMS)
        for warps in (4, 8)
    ]
else:
    CONFIGS = [make_config(block_n, programs, 4) for block_n in (32, 128) for programs in (0, 2)]


def heuristic(key: tuple[Any, ...]) -> triton.Config:
    """Without tuning: one block per row when it fits in 4096 elements, persistent programs."""
    n_cols = key[0]
    return make_config(min(triton.next_power_of_2(n_cols), 4096), PERSISTENT_PROGRAMS, 8 if ON_GPU else 4)


@tdl.autotune(key=["n_cols"], configs=CONFIGS, fallback_heuristic=heuristic)
@triton.jit
def rmsnorm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    ticket_ptr,
    n_rows,
    n_cols,
    stride_x,
    stride_y,
    eps,
    BLOCK_N: tl.constexpr,
    PROGRAMS: tl.constexpr,
):
    if PROGRAMS > 0:
        row = tl.atomic_add(ticket_ptr, 1)
    else:
        row = tl.program_id(0)
    while row < n_rows:
        x_row = x_ptr + row.to(tl.int64) * stride_x
        y_row = y_ptr + row.to(tl.int64) * stride_y
        squares = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            squares += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
        if PROGRAMS > 0:
            row = tl.atomic_add(ticket_ptr, 1)
        else:
            row += n_rows  # one row per program: done


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS, out: torch.Tensor | None = None):
    """RMSNorm over the last dimension of a 2-D ``x`` (rows with unit stride), into ``out`` if given."""
    if x.ndim != 2 or x.stride(1) != 1 or weight.shape != (x.shape[1],):
        raise ValueError("x must be a 2-D tensor with contiguous rows and weight must match its row length")
    y = torch.empty_like(x) if out is None else out
    n_rows, n_cols = x.shape

    def grid(meta: dict[str, int]) -> tuple[int]:
        return (min(n_rows, meta["PROGRAMS"]) if meta["PROGRAMS"] else n_rows,)

    rmsnorm_kernel[grid](
        x, weight, y, ticket_counter(x.device), n_rows, n_cols, x.stride(0), y.stride(0), eps
    )
    return y


def run(size: str = "tiny", dtype: torch.dtype = torch.float32) -> common.ExampleResult:
    """Normalise random rows and compare with ``torch.nn.functional.rms_norm``.

    Every launch writes into a buffer first filled with NaN, so a launch that skips rows (a
    persistent config whose counter was not reset) fails the check.
    """
    shape = SIZES[size]
    gen = common.generator()
    x = torch.randn((shape["rows"], shape["cols"]), device=DEVICE, dtype=dtype, generator=gen)
    w = torch.rand((shape["cols"],), device=DEVICE, dtype=dtype, generator=gen) + 0.5
    out = torch.empty_like(x)

    def call() -> torch.Tensor:
        return rmsnorm(x, w, out=out.fill_(float("nan"))).clone()

    return common.evaluate(
        "rmsnorm",
        rmsnorm_kernel,
        call,
        lambda: torch.nn.functional.rms_norm(x.float(), (shape["cols"],), w.float(), EPS),
        tolerance=TOLERANCE[dtype],
        problem=shape,
        dtype=dtype,
    )


if __name__ == "__main__":
    sys.exit(common.main(run, __doc__))
