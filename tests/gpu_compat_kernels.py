"""Kernels written the way triton-dejavu's users write them, for the tune-then-restore compatibility tests.

- ``attention``: a variable-length flash-attention forward in the style of triton-dejavu's
  flash-attention test case: a ``ConfigSpace`` over BLOCK_M / BLOCK_N / PRE_LOAD_V / num_warps /
  num_stages with a ``kwarg_conditions``, a key of 29 strides, sizes and flags, packed sequences
  addressed through ``cu_seqlens``, grouped-query heads, ``use_cuda_graph=True`` and ``warmup``/``rep``.
- ``rmsnorm``: RMSNorm whose persistent configs carry a per-config ``pre_hook`` (it zeroes the ticket
  counter the programs take rows from), which must run after a restore too.

Run as a script, it launches the chosen kernels once each (the first call tunes or restores), checks
the outputs against torch, counts the benchmark launches from outside the package (launches of the
jitted function beyond the script's own) and writes a JSON report. On a machine without a GPU, or
with ``TRITON_INTERPRET=1``, it runs through Triton's interpreter at tiny sizes.

    python tests/gpu_compat_kernels.py --case all --report report.json
"""

from __future__ import annotations

import os

import torch

if os.environ.get("TRITON_INTERPRET", "") != "1" and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: its own @jit functions too

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import triton
import triton.language as tl

import triton_dejavu_like as tdl

ON_GPU = os.environ.get("TRITON_INTERPRET") != "1"
DEVICE = "cuda" if ON_GPU else "cpu"
DTYPE = torch.float16 if ON_GPU else torch.float32

# --- variable-length attention ------------------------------------------------------------------------

ATTENTION_KEY = [
    "stride_qz",
    "stride_qh",
    "stride_qm",
    "stride_qk",
    "stride_kz",
    "stride_kh",
    "stride_kn",
    "stride_kk",
    "stride_vz",
    "stride_vh",
    "stride_vk",
    "stride_vn",
    "stride_oz",
    "stride_oh",
    "stride_om",
    "stride_on",
    "Z",
    "HQ",
    "HK",
    "MAX_SEQLENS_Q",
    "MAX_SEQLENS_K",
    "ACTUAL_BLOCK_DMODEL",
    "dropout_p",
    "IS_CAUSAL",
    "VARLEN",
    "BLOCK_DMODEL",
    "ENABLE_DROPOUT",
    "RETURN_ENCODED_SOFTMAX",
    "USE_ALIBI",
]


def key_block_fits(kwargs: dict[str, Any]) -> bool:
    """A key block no longer than the query block (the causal diagonal stays within one step)."""
    return kwargs["BLOCK_N"] <= kwargs["BLOCK_M"]


if ON_GPU:
    ATTENTION_SPACE = tdl.ConfigSpace(
        {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64, 128], "PRE_LOAD_V": [False, True]},
        kwarg_conditions=[key_block_fits],
        num_warps=[4, 8],
        num_stages=[1, 2],
    )
    ATTENTION_SIZES = {"seqlens": [512, 1000, 77, 2048], "HQ": 16, "HK": 4, "head_dim": 80}
else:
    ATTENTION_SPACE = tdl.ConfigSpace(
        {"BLOCK_M": [16, 32], "BLOCK_N": [16], "PRE_LOAD_V": [False, True]},
        kwarg_conditions=[key_block_fits],
        num_warps=[4],
        num_stages=[1],
    )
    ATTENTION_SIZES = {"seqlens": [3, 17], "HQ": 2, "HK": 1, "head_dim": 12}


@tdl.autotune(
    key=ATTENTION_KEY,
    config_space=ATTENTION_SPACE,
    use_cuda_graph=True,
    warmup=5,
    rep=20,
)
@triton.jit
def varlen_attention_kernel(
    Q,
    K,
    V,
    Out,
    sm_scale,
    cu_seqlens_q,
    cu_seqlens_k,
    stride_qz,
    stride_qh,
    stride_qm,
    stride_qk,
    stride_kz,
    stride_kh,
    stride_kn,
    stride_kk,
    stride_vz,
    stride_vh,
    stride_vk,
    stride_vn,
    stride_oz,
    stride_oh,
    stride_om,
    stride_on,
    Z,
    HQ,
    HK,
    MAX_SEQLENS_Q,
    MAX_SEQLENS_K,
    ACTUAL_BLOCK_DMODEL,
    dropout_p,
    IS_CAUSAL: tl.constexpr,
    VARLEN: tl.constexpr,
    BLOCK_DMODEL: tl.constexpr,
    ENABLE_DROPOUT: tl.constexpr,
    RETURN_ENCODED_SOFTMAX: tl.constexpr,
    USE_ALIBI: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRE_LOAD_V: tl.constexpr,
):
    tl.static_assert(not ENABLE_DROPOUT and not RETURN_ENCODED_SOFTMAX and not USE_ALIBI)
    start_m = tl.program_id(0)
    off_h_q = tl.program_id(1)
    off_z = tl.program_id(2)
    off_h_k = off_h_q // (HQ // HK)
    if VARLEN:
        q_start = tl.load(cu_seqlens_q + off_z)
        seqlen_q = tl.load(cu_seqlens_q + off_z + 1) - q_start
        k_start = tl.load(cu_seqlens_k + off_z)
        seqlen_k = tl.load(cu_seqlens_k + off_z + 1) - k_start
    else:
        q_start = off_z * 0  # a tensor, as in the varlen branch
        seqlen_q = MAX_SEQLENS_Q
        k_start = off_z * 0
        seqlen_k = MAX_SEQLENS_K
    if start_m * BLOCK_M < seqlen_q:
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_DMODEL)
        d_ok = offs_d < ACTUAL_BLOCK_DMODEL
        q_base = Q + off_z.to(tl.int64) * stride_qz + off_h_q * stride_qh + q_start.to(tl.int64) * stride_qm
        k_base = K + off_z.to(tl.int64) * stride_kz + off_h_k * stride_kh + k_start.to(tl.int64) * stride_kn
        v_base = V + off_z.to(tl.int64) * stride_vz + off_h_k * stride_vh + k_start.to(tl.int64) * stride_vk
        q = tl.load(
            q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk,
            mask=(offs_m[:, None] < seqlen_q) & d_ok[None, :],
            other=0.0,
        )
        qk_scale = sm_scale * 1.4426950408889634  # base 2
        m_i = tl.full((BLOCK_M,), -1.0e38, dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_DMODEL), dtype=tl.float32)
        end_n = tl.minimum((start_m + 1) * BLOCK_M, seqlen_k) if IS_CAUSAL else seqlen_k
        for start_n in range(0, end_n, BLOCK_N):
            cols = start_n + offs_n
            k = tl.load(
                k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kk,
                mask=(cols[None, :] < seqlen_k) & d_ok[:, None],
                other=0.0,
            )
            if PRE_LOAD_V:
                v = tl.load(
                    v_base + cols[:, None] * stride_vk + offs_d[None, :] * stride_vn,
                    mask=(cols[:, None] < seqlen_k) & d_ok[None, :],
                    other=0.0,
                )
            qk = tl.dot(q, k) * qk_scale
            visible = cols[None, :] < seqlen_k
            if IS_CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None])
            qk = tl.where(visible, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, axis=1))
            p = tl.exp2(qk - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            if not PRE_LOAD_V:
                v = tl.load(
                    v_base + cols[:, None] * stride_vk + offs_d[None, :] * stride_vn,
                    mask=(cols[:, None] < seqlen_k) & d_ok[None, :],
                    other=0.0,
                )
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        out = acc / l_i[:, None]
        o_base = Out + off_z.to(tl.int64) * stride_oz + off_h_q * stride_oh + q_start.to(tl.int64) * stride_om
        tl.store(
            o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_on,
            out.to(Out.dtype.element_ty),
            mask=(offs_m[:, None] < seqlen_q) & d_ok[None, :],
        )


def varlen_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int, causal: bool
) -> torch.Tensor:
    """Packed sequences: q (total, HQ, D), k and v (total, HK, D); sequence i spans cu_seqlens[i:i+2]."""
    _total, hq, head_dim = q.shape
    hk = k.shape[1]
    o = torch.empty_like(q)
    z = cu_seqlens.numel() - 1

    def grid(meta: dict[str, Any]) -> tuple[int, int, int]:
        return (triton.cdiv(max_seqlen, meta["BLOCK_M"]), hq, z)

    varlen_attention_kernel[grid](
        q,
        k,
        v,
        o,
        1.0 / math.sqrt(head_dim),
        cu_seqlens,
        cu_seqlens,
        0,  # varlen: no batch stride, sequences start at cu_seqlens
        q.stride(1),
        q.stride(0),
        q.stride(2),
        0,
        k.stride(1),
        k.stride(0),
        k.stride(2),
        0,
        v.stride(1),
        v.stride(0),
        v.stride(2),
        0,
        o.stride(1),
        o.stride(0),
        o.stride(2),
        z,
        hq,
        hk,
        max_seqlen,
        max_seqlen,
        head_dim,
        0.0,
        IS_CAUSAL=causal,
        VARLEN=True,
        BLOCK_DMODEL=max(16, triton.next_power_of_2(head_dim)),
        ENABLE_DROPOUT=False,
        RETURN_ENCODED_SOFTMAX=False,
        USE_ALIBI=False,
    )
    return o


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seqlens: list[int], causal: bool
) -> torch.Tensor:
    groups = q.shape[1] // k.shape[1]
    outs, start = [], 0
    for n in seqlens:
        qs, ks, vs = (t[start : start + n].float().transpose(0, 1) for t in (q, k, v))
        ks, vs = ks.repeat_interleave(groups, 0), vs.repeat_interleave(groups, 0)
        outs.append(
            torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal).transpose(0, 1)
        )
        start += n
    return torch.cat(outs)


def attention_case() -> tuple[Any, Callable[[], torch.Tensor], Callable[[], torch.Tensor], float]:
    sizes = ATTENTION_SIZES
    seqlens = sizes["seqlens"]
    total = sum(seqlens)
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    q = torch.randn((total, sizes["HQ"], sizes["head_dim"]), device=DEVICE, dtype=DTYPE, generator=gen)
    k = torch.randn((total, sizes["HK"], sizes["head_dim"]), device=DEVICE, dtype=DTYPE, generator=gen)
    v = torch.randn((total, sizes["HK"], sizes["head_dim"]), device=DEVICE, dtype=DTYPE, generator=gen)
    cu = torch.tensor([0, *torch.tensor(seqlens).cumsum(0).tolist()], device=DEVICE, dtype=torch.int32)
    return (
        varlen_attention_kernel,
        lambda: varlen_attention(q, k, v, cu, max(seqlens), True),
        lambda: attention_reference(q, k, v, seqlens, True),
        2e-2 if ON_GPU else 1e-2,
    )


# --- RMSNorm with per-config pre-hooks -----------------------------------------------------------------

PERSISTENT = 4 * torch.cuda.get_device_properties(0).multi_processor_count if ON_GPU else 2
_tickets: dict[str, torch.Tensor] = {}


def ticket(device: torch.device) -> torch.Tensor:
    if str(device) not in _tickets:
        _tickets[str(device)] = torch.zeros(1, dtype=torch.int32, device=device)
    return _tickets[str(device)]


def zero_ticket(nargs: dict[str, Any]) -> None:
    """Per-config pre-hook of the persistent configs: rows are handed out from 0 again."""
    nargs["ticket_ptr"].zero_()


def rms_config(block_n: int, programs: int, warps: int) -> triton.Config:
    return triton.Config(
        {"BLOCK_N": block_n, "PROGRAMS": programs},
        num_warps=warps,
        pre_hook=zero_ticket if programs else None,
    )


if ON_GPU:
    RMS_CONFIGS = [rms_config(b, p, w) for b in (1024, 2048, 4096) for p in (0, PERSISTENT) for w in (4, 8)]
    RMS_SIZES = {"rows": 8192, "cols": 4096}
else:
    RMS_CONFIGS = [rms_config(b, p, 4) for b in (16, 64) for p in (0, PERSISTENT)]
    RMS_SIZES = {"rows": 4, "cols": 80}


@tdl.autotune(key=["n_cols"], configs=RMS_CONFIGS, warmup=5, rep=20)
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
            row += n_rows


#: Only persistent configs, each with the hook: whatever wins, a restored launch needs its pre_hook
#: (the second launch of a process finds the counter where the first left it).
persistent_rmsnorm_kernel = tdl.autotune(
    key=["n_cols"],
    configs=[
        rms_config(c.kwargs["BLOCK_N"], PERSISTENT, c.num_warps) for c in RMS_CONFIGS if c.kwargs["PROGRAMS"]
    ],
    warmup=5,
    rep=20,
)(rmsnorm_kernel.fn)


def rmsnorm(
    x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, eps: float = 1e-6, kernel: Any = rmsnorm_kernel
) -> torch.Tensor:
    n_rows, n_cols = x.shape

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (min(n_rows, meta["PROGRAMS"]) if meta["PROGRAMS"] else n_rows,)

    kernel[grid](x, w, out, ticket(x.device), n_rows, n_cols, x.stride(0), out.stride(0), eps)
    return out


def rmsnorm_case(
    kernel: Any = rmsnorm_kernel,
) -> tuple[Any, Callable[[], torch.Tensor], Callable[[], torch.Tensor], float]:
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    x = torch.randn((RMS_SIZES["rows"], RMS_SIZES["cols"]), device=DEVICE, dtype=DTYPE, generator=gen)
    w = torch.rand((RMS_SIZES["cols"],), device=DEVICE, dtype=DTYPE, generator=gen) + 0.5
    out = torch.empty_like(x)
    return (
        kernel,
        lambda: rmsnorm(x, w, out.fill_(float("nan")), kernel=kernel).clone(),  # skipped rows stay NaN
        lambda: torch.nn.functional.rms_norm(x.float(), (x.shape[1],), w.float(), 1e-6),
        4e-3 if ON_GPU else 1e-5,
    )


CASES: dict[str, Callable[[], tuple[Any, Callable[[], torch.Tensor], Callable[[], torch.Tensor], float]]] = {
    "attention": attention_case,
    "rmsnorm": rmsnorm_case,
    "rmsnorm_persistent": lambda: rmsnorm_case(persistent_rmsnorm_kernel),
}

# --- running one case and reporting --------------------------------------------------------------------


@contextmanager
def count_launches(kernel: Any) -> Iterator[list[int]]:
    """Launches of the jitted function while the block runs (compile-only warmups excluded)."""
    jitted = kernel.fn
    shadowed = "run" in vars(jitted)
    original = jitted.run
    count = [0]

    def counting_run(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("warmup", False):
            count[0] += 1
        return original(*args, **kwargs)

    jitted.run = counting_run
    try:
        yield count
    finally:
        if shadowed:
            jitted.run = original
        else:
            del jitted.run


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    if not torch.isfinite(out).all():
        return math.inf
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())


def run_case(name: str, launches: int = 2) -> dict[str, Any]:
    kernel, call, reference, tolerance = CASES[name]()
    with count_launches(kernel) as launched:
        start = time.perf_counter()
        outputs = [call()]
        if ON_GPU:
            torch.cuda.synchronize()
        first_call_s = time.perf_counter() - start
        decision = kernel.last_decision
        timed = len(kernel.configs_timings) if decision == "tuned" else 0
        outputs += [call() for _ in range(launches - 1)]
        if ON_GPU:
            torch.cuda.synchronize()
    ref = reference()
    error = max(relative_error(out, ref) for out in outputs)
    config = kernel.best_config
    return {
        "case": name,
        "device": torch.cuda.get_device_name() if ON_GPU else "interpreter",
        "decision": decision,
        "configs_in_space": len(kernel.configs),
        "configs_timed": timed,
        "bench_launches": launched[0] - launches,
        "config": {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages},
        "pre_hook": getattr(config.pre_hook, "__name__", None),
        "max_error": error,
        "tolerance": tolerance,
        "ok": error <= tolerance,
        "first_call_s": first_call_s,
        "cache_path": str(kernel.cache_path()),
        "key_length": len(kernel.keys),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--case", choices=[*CASES, "all"], default="all")
    parser.add_argument("--report", type=Path, help="write the reports (a list) as JSON here")
    args = parser.parse_args()
    names = list(CASES) if args.case == "all" else [args.case]
    reports = [run_case(name) for name in names]
    for r in reports:
        print(
            f"{r['case']}: {r['decision']} in {r['first_call_s']:.2f} s, {r['configs_timed']} of "
            f"{r['configs_in_space']} configs timed, {r['bench_launches']} benchmark launches, "
            f"error {r['max_error']:.1e} ({'OK' if r['ok'] else 'WRONG'}), config {r['config']}"
        )
    if args.report:
        args.report.write_text(json.dumps(reports, indent=1))
    return 0 if all(r["ok"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
