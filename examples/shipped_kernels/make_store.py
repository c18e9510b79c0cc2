"""Write ``shipped_kernels/tuned/``: the results the package ships (run it again after changing the
kernel or upgrading Triton; the store's path records both).

    TRITON_INTERPRET=1 python examples/shipped_kernels/make_store.py

A real library would run it on each GPU it supports (without ``TRITON_INTERPRET``); this example
tunes for Triton's interpreter on the CPU, the platform the test suite runs on.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STORE = HERE / "shipped_kernels" / "tuned"


def main() -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ["TRITON_DEJAVU_STORAGE"] = str(STORE)  # the package's folder is the written root here
    os.environ.pop("TRITON_DEJAVU_TAG", None)
    STORE.mkdir(exist_ok=True)
    sys.path.insert(0, str(HERE))
    import shipped_kernels
    import torch

    for n in shipped_kernels.SHIPPED_SIZES:
        x = torch.rand(n)
        torch.testing.assert_close(shipped_kernels.scale(x, 3.0), x * 3.0)
        tuner = shipped_kernels.scale_kernel
        print(f"n={n}: {tuner.last_decision}, {tuner.best_config}")
    for lock in STORE.rglob("*.lock"):  # the lock files of the writes are not part of the store
        lock.unlink()
    print(f"stored in {shipped_kernels.scale_kernel.cache_path()}")


if __name__ == "__main__":
    main()
