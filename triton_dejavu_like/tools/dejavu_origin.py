"""Where a triton-dejavu ``cache.json`` comes from: the platform, kernel and tag its path and
signature name (read through triton-dejavu's folder layouts, :data:`~..store.layout.DEJAVU_LAYOUTS`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..store import identity, layout

#: ``JITFunction(module:name)``; the name is qualified for a kernel made in a function
#: (``make.<locals>.kernel``).
_SIGNATURE = re.compile(r"^\w+\((?:([\w.]+):)?([\w.<>]+)\)$")
_TRITON_DIR = re.compile(r"^triton_\d+\.\d+[\w.+-]*$")
_TOOLCHAIN_DIR = re.compile(r"^(cuda|rocm)_(torch_)?\d+(\.\d+)*$")
_VERSION_DIR = re.compile(r"^dejavu_\d+\.\d+(\.\d+)?$")


@dataclass
class DejavuOrigin:
    """What a triton-dejavu path and file tell about the tuning: platform, kernel and tag."""

    triton: str | None = None
    toolchain: str | None = None
    gpu: str | None = None
    kernel: str | None = None
    tag: str | None = None
    module: str | None = None  # of the kernel, in the signature


def origin_of(path: Path, doc: dict[str, Any]) -> DejavuOrigin:
    """What a triton-dejavu path says, e.g.
    ``<root>/dejavu_0.7/triton_3.2.0/cuda_12.4/gpu_NAME/<kernel>/autotune_config-h/...
    /kernel_configs-h/<tag>/cache.json`` (every layout of :data:`~.layout.DEJAVU_LAYOUTS`), and the
    kernel named by the file's ``signature``. Only the folders from the last ``dejavu_<version>`` on
    are read: the folders above it are the user's (``/mnt/gpu_cache/...`` names no GPU)."""
    levels = layout.dejavu_levels(path)
    if levels is not None:
        origin = DejavuOrigin(
            triton=levels["triton"].removeprefix("triton_"),
            toolchain=_toolchain(levels["toolchain"]),
            gpu=_gpu(levels["gpu"]),
            kernel=layout.dejavu_kernel(levels),
            tag=levels["tag"],
        )
    else:
        origin = _scan(path)
    signature = doc.get("signature")
    if isinstance(signature, str) and (m := _SIGNATURE.match(signature.strip())):
        origin.module, origin.kernel = m.group(1), m.group(2).rpartition(".")[2]
    return origin


def _scan(path: Path) -> DejavuOrigin:
    """What a path in no known layout says: its folders named as triton-dejavu names them, below its
    last ``dejavu_<version>`` folder if it has one."""
    parts = path.parts
    versions = [i for i, part in enumerate(parts[:-1]) if _VERSION_DIR.match(part)]
    if versions:
        parts = parts[versions[-1] + 1 :]
    origin = DejavuOrigin()
    for i, part in enumerate(parts):
        if _TRITON_DIR.match(part) and origin.triton is None:
            origin.triton = part.removeprefix("triton_")
        elif _TOOLCHAIN_DIR.match(part) and origin.toolchain is None:
            origin.toolchain = _toolchain(part)
        elif part.startswith("gpu_") and origin.gpu is None:
            origin.gpu = _gpu(part)
        elif part.startswith("autotune_config-") and i > 0:
            origin.kernel = parts[i - 1].rpartition(".")[2]
    if len(parts) >= 3 and parts[-3].startswith("kernel_configs-"):
        origin.tag = parts[-2]
    return origin


def given_platform(given: Mapping[str, str]) -> dict[str, str]:
    """Platform values given by the user (``--triton/--toolchain/--gpu``), named as the ones a path
    gives are: a GPU's spaces become ``_`` as the tuner's own name has them (``NVIDIA H100 80GB HBM3``
    is stored as ``NVIDIA_H100_80GB_HBM3``, the folder it lands in). A value without a letter or a
    digit names nothing: ValueError."""
    normalise = {"triton": identity.sanitize, "toolchain": _toolchain, "gpu": _gpu_name}
    named: dict[str, str] = {}
    for name, value in given.items():
        if not any(c.isalnum() for c in value):
            raise ValueError(f"--{name} {value!r} names no {name}")
        named[name] = normalise[name](value)
    return named


def _toolchain(folder: str) -> str:
    """This package's name of a toolchain folder: triton-dejavu names CUDA ``cuda_torch_12.4`` when
    it cannot run Triton's ptxas (the version is then torch's CUDA, named ``cuda_12.4`` here)."""
    return identity.sanitize(re.sub(r"^cuda_torch_", "cuda_", folder))


def _gpu(folder: str) -> str:
    """This package's name of the GPU in a ``gpu_<name>`` folder: triton-dejavu replaced ' ' and '/'
    by '_' in the device's name, so ``AMD_Radeon_PRO_W7900_(gfx1100)`` is given back its spaces before
    it is sanitised as the live name ``AMD Radeon PRO W7900 (gfx1100)`` is."""
    return _gpu_name(folder.removeprefix("gpu_"))


def _gpu_name(name: str) -> str:
    return identity.sanitize(name.replace("_", " "))
