"""The CUDA state of this process, as the isolation code on both sides needs to know it."""

from __future__ import annotations

import sys

from ..launch import one_line


def cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def current_device() -> int | None:
    import torch

    return torch.cuda.current_device() if torch.cuda.is_initialized() else None


def synchronize() -> None:
    if cuda_initialized():
        import torch

        torch.cuda.synchronize()


def cuda_context_error() -> str | None:
    """The error that makes this process's CUDA context unusable, or None if it still works."""
    try:
        synchronize()
    except Exception as exc:
        return one_line(exc)
    return None
