"""A SPEC for ahead-of-time tuning: the example matmul over the shapes a deployment serves.

    python -m triton_dejavu_like tune examples/aot_spec.py                 # here, one case after another
    python -m triton_dejavu_like tune examples/aot_spec.py --gpus all      # one worker per GPU
    python -m triton_dejavu_like tune examples/aot_spec.py --ray           # a Ray cluster
    TRITON_INTERPRET=1 python -m triton_dejavu_like tune examples/aot_spec.py:tiny_cases   # small shapes, CPU

Each case builds its inputs on the current device and launches the autotuned kernel once: the
launch tunes the shape's key, or restores it when it is already stored.
"""

from __future__ import annotations

import _common as common  # first: it picks the GPU or the interpreter before triton is imported
import torch
from matmul import matmul

import triton_dejavu_like as tdl

#: (M, N, K): the token counts a server batches times the model's projection sizes.
SHAPES = [(m, n, k) for m in (16, 64, 256, 1024) for n, k in ((4096, 4096), (11008, 4096), (4096, 11008))]
TINY_SHAPES = [(40, 32, 24), (16, 16, 16), (33, 17, 20), (24, 40, 16), (48, 16, 32), (20, 20, 20)]
#: 32 shapes for benchmarks/aot_scaling.py.
SCALING_SHAPES = [
    (m, n, k)
    for m in (16, 32, 64, 128, 256, 512, 1024, 2048)
    for n, k in ((4096, 4096), (11008, 4096), (4096, 11008), (8192, 1024))
]

#: 96 shapes (12 token counts x 8 projections) for benchmarks/aot_scaling.py --cases wide_scaling_cases.
WIDE_SCALING_SHAPES = [
    (m, n, k)
    for m in (16, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096)
    for n, k in (
        (4096, 4096),
        (11008, 4096),
        (4096, 11008),
        (8192, 1024),
        (1024, 8192),
        (6144, 4096),
        (14336, 4096),
        (4096, 14336),
    )
]


def multiply(m: int, n: int, k: int, dtype: torch.dtype = torch.float16) -> None:
    a = torch.randn((m, k), device=common.DEVICE, dtype=dtype)
    b = torch.randn((k, n), device=common.DEVICE, dtype=dtype)
    matmul(a, b)


def cases() -> list[tdl.TuneCase]:
    return [tdl.TuneCase(f"matmul-{m}x{n}x{k}", multiply, (m, n, k)) for m, n, k in SHAPES]


def scaling_cases() -> list[tdl.TuneCase]:
    return [tdl.TuneCase(f"matmul-{m}x{n}x{k}", multiply, (m, n, k)) for m, n, k in SCALING_SHAPES]


def wide_scaling_cases() -> list[tdl.TuneCase]:
    return [tdl.TuneCase(f"matmul-{m}x{n}x{k}", multiply, (m, n, k)) for m, n, k in WIDE_SCALING_SHAPES]


def tiny_cases() -> list[tdl.TuneCase]:
    """Small float32 shapes, for the interpreter on a CPU."""
    return [
        tdl.TuneCase(f"matmul-{m}x{n}x{k}", multiply, (m, n, k, torch.float32)) for m, n, k in TINY_SHAPES
    ]
