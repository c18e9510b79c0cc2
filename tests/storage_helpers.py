"""Helpers shared by the storage, concurrency and command-line tests.

Entries are built with the package's own codec, kernels run under the interpreter, and the worker
functions at the bottom run in child processes (``multiprocessing`` forkserver), so they live in an
importable module rather than in a test file.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import multiprocessing
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import triton
import triton.language as tl

import triton_dejavu_like as tdl
from triton_dejavu_like import store as storage
from triton_dejavu_like.codec import encode_config, encode_key, key_id
from triton_dejavu_like.store import cache_file as cache_file_module
from triton_dejavu_like.store import files as store_files

IDENTITY: dict[str, str] = {
    "dejavu": "0.1",
    "triton": "3.9.0",
    "toolchain": "cuda_12.8",
    "gpu": "NVIDIA_H100_80GB_HBM3",
    "kernel": "matmul",
    "autotune_config": "0123456789abcdef",
    "code_version": "1111111111111111",
    "tune_features": "2222222222222222",
    "kernel_configs": "3333333333333333",
    "tag": "default",
}
PARAMETERS = ("a_ptr", "b_ptr", "n", "BLOCK")


def make_entry(
    key: tuple[Any, ...],
    block: int = 64,
    *,
    ms: float = 1.0,
    tuned_at: str = "2025-01-02T03:04:05+00:00",
    strategy: str = "exhaustive",
    num_warps: int = 4,
) -> dict[str, Any]:
    """A complete, valid entry (the shape the autotuner writes) for ``key``."""
    config = triton.Config({"BLOCK": block}, num_warps=num_warps)
    return {
        "key": encode_key(key),
        "config": encode_config(config),
        "timings_ms": [ms, ms * 0.9, ms * 1.1],
        "evaluated": 3,
        "space_size": 3,
        "strategy": strategy,
        "budget": None,
        "tuning_time_s": 0.5,
        "tuned_at": tuned_at,
        "candidates": "c" * 16,
        "top": [{"config": encode_config(config), "timings_ms": [ms, ms * 0.9, ms * 1.1]}],
        "ruled_out": [
            {"config": encode_config(triton.Config({"BLOCK": 4096}, num_warps=1)), "reason": "OutOfResources"}
        ],
    }


def entries_for(keys: Iterable[tuple[Any, ...]], **options: Any) -> dict[str, dict[str, Any]]:
    return {key_id(k): make_entry(k, **options) for k in keys}


def cache_file(root: Path, identity: dict[str, str] | None = None, **options: Any) -> storage.CacheFile:
    return storage.CacheFile.for_identity(root, identity or IDENTITY, parameters=PARAMETERS, **options)


def write_document(path: Path, identity: dict[str, str], entries: dict[str, Any]) -> bytes:
    """Write a document directly (no lock, no validation) and return its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = storage.dump_document(storage.new_document(identity, entries))
    path.write_bytes(data)
    return data


def stored_entries(path: Path) -> dict[str, dict[str, Any]]:
    doc = storage.read_document(path)
    assert not doc.rejected, doc.rejected
    return {kid: entry.to_json() for kid, entry in doc.entries.items()}


def as_json(entries: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Loaded entries (StoredEntry objects) as the JSON objects they are stored as."""
    return {kid: entry.to_json() for kid, entry in entries.items()}


#: Root ignores file permissions: tests of a store it cannot write refuse its writes with deny_opens.
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def deny_opens(monkeypatch, under: Path, error: int, *, writes_only: bool) -> None:
    """Make ``os.open`` fail with ``error`` for paths under ``under`` (for writing only, if asked)."""
    real_open = os.open
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def guarded(path, flags, *args, **kwargs):
        inside = str(Path(path).absolute()).startswith(str(under))
        if inside and (not writes_only or flags & write_flags):
            raise OSError(error, os.strerror(error), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)


def aside_files(path: Path, suffix: str) -> list[Path]:
    return sorted(path.parent.glob(path.name + suffix + "*"))


# --- kernels under the interpreter ------------------------------------------------------------------------


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.jit
def negate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=mask), mask=mask)


BLOCKS = (16, 32, 64)


class InstantBench:
    """A ``do_bench`` that does not run the kernel: 1 ms for every config, counted per call."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls = 0
        self.delay_s = delay_s
        self._lock = threading.Lock()

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Sequence[float] = (0.5, 0.2, 0.8)) -> list:
        with self._lock:
            self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)  # lets other threads run in the middle of a tuning
        return [1.0] * len(quantiles)


def make_tuner(kernel: Any = double_kernel, bench: Any = None, **options: Any) -> tdl.Autotuner:
    options.setdefault("key", ["n"])
    options.setdefault("configs", [triton.Config({"BLOCK": b}) for b in BLOCKS])
    options["do_bench"] = bench if bench is not None else InstantBench()
    return tdl.autotune(**options)(kernel)


def launch(tuner: tdl.Autotuner, n: int, *, expected: Callable[[Any], Any] | None = None) -> None:
    import torch  # only the launching tests need it; the forkserver children stay light

    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    want = expected(x) if expected is not None else x * 2
    assert torch.equal(out, want), f"wrong result for n={n}"


def stored_path(tuner: tdl.Autotuner) -> Path:
    return tuner.cache_path()


# --- child processes --------------------------------------------------------------------------------------


def process_context() -> multiprocessing.context.BaseContext:
    """Forkserver children start in milliseconds: the server imports the heavy modules once.

    (Only installed modules are preloaded: Python 3.11's forkserver ignores the parent's sys.path.)
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["triton", "triton.language", "triton_dejavu_like"])
    return ctx


def worker_record(start: Any, root: str, keys: list[int], same_block: int | None = None) -> None:
    """Record one entry per key, each in its own locked read-merge-write, after all workers are ready."""
    start.wait()
    cf = cache_file(Path(root))
    for k in keys:
        assert cf.record({key_id((k,)): make_entry((k,), block=same_block or 16 * (1 + k % 4))})


def worker_hold_lock(path: str, conn: Any) -> None:
    """Take the cache file's lock, say so, then wait to be killed."""
    with store_files.file_lock(Path(path)):
        conn.send("locked")
        time.sleep(120)


#: The functions of cache_file.py and files.py a write goes through; the crash test stops at each of
#: their lines.
WRITE_PATH = frozenset(
    {
        "record",
        "update",
        "_locked",
        "file_lock",
        "remove_orphan_temp_files",
        "_own",
        "_read",
        "_read_parsed",
        "_parse",
        "_dump",
        "atomic_write",
        "_temp_name",
        "_keep_attributes",
        "_fsync_dir",
    }
)


def worker_record_stopping_at_line(root: str, key: int, stop_at: tuple[str, int] | None, conn: Any) -> None:
    """Record one entry; on reaching the line ``stop_at`` (function name, line number) of the write
    path, report and freeze, so that the parent SIGKILLs this process at exactly that point.

    With ``stop_at=None`` it runs to the end and reports the distinct lines the write path ran.
    """
    sources = {cache_file_module.__file__, store_files.__file__}
    executed: list[tuple[str, int]] = []

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            here = (frame.f_code.co_name, frame.f_lineno)
            if here == stop_at:
                conn.send(("stopped", here))
                time.sleep(120)
            if here not in executed:
                executed.append(here)
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_filename in sources and code.co_name in WRITE_PATH:
            return local
        return None

    cf = cache_file(Path(root), lock_timeout=20)
    sys.settrace(tracer)
    try:
        ok = cf.record({key_id((key,)): make_entry((key,), block=32)})
    finally:
        sys.settrace(None)
    conn.send(("done", executed, ok))


class SerialLaunch:
    """Wraps an interpreted kernel so that launches from several threads take turns.

    Triton's interpreter keeps the grid position in module-level state, so two threads cannot run
    interpreted kernels at once (on a GPU they can). Only the kernel body is serialised: the
    autotuner's key, miss handling, tuning and storage still run concurrently.
    """

    _launch_lock = threading.Lock()

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.arg_names = fn.arg_names

    def run(self, *args: Any, **kwargs: Any) -> Any:
        with self._launch_lock:
            return self.fn.run(*args, **kwargs)


def deny_search(monkeypatch, folder: Path) -> None:
    """Make ``folder`` one this user cannot search (mode 0o600): what lies under it cannot be looked
    up (as root, which searches any folder, ``os.stat`` of such a path fails as it would). Undo with
    ``monkeypatch.undo()`` and ``folder.chmod(0o755)``."""
    if AS_ROOT:
        real_stat = os.stat

        def guarded(path, *args, **kwargs):
            if str(Path(path).absolute()).startswith(str(folder) + os.sep):
                raise PermissionError(13, os.strerror(13), str(path))
            return real_stat(path, *args, **kwargs)

        monkeypatch.setattr(os, "stat", guarded)
    folder.chmod(0o600)
