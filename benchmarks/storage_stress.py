"""Storage under stress: concurrent writers killed at random, concurrent readers, nothing lost.

N writer processes each record R rounds of E entries into one storage root, spread over F cache
files (several kernels whose files every writer shares), one locked read-merge-write per entry.
A writer notes each entry whose ``record()`` returned True in its own append-only log: that entry is
*acknowledged*. Meanwhile the parent sends K SIGKILLs to random writers at random moments (whatever
they are doing: holding the lock, writing the temporary file, renaming it) and restarts each killed
writer, which carries on with the entries it has not acknowledged. M reader processes load every
file in a loop. At the end it prints how many entries were acknowledged, how many are found in the
files, how many were lost (acknowledged but not found: must be 0), what the readers saw, the files
left beside the cache files, and the elapsed time; it exits 1 if anything was lost or corrupted.

    python benchmarks/storage_stress.py [--writers 16] [--rounds 3] [--kills 50] [--readers 4]

Runs on CPU only (no Triton kernel is launched). Children are forked from the parent, which has
imported the package once, so a restart costs milliseconds.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import triton

from triton_dejavu_like import DejavuStorageWarning
from triton_dejavu_like import store as storage
from triton_dejavu_like.codec import encode_config, encode_key, key_id
from triton_dejavu_like.store import layout

IDENTITY = {
    "dejavu": "0.1",
    "triton": "3.9.0",
    "toolchain": "cuda_12.8",
    "gpu": "stress",
    "autotune_config": "a" * 16,
    "code_version": "b" * 16,
    "tune_features": "c" * 16,
    "kernel_configs": "d" * 16,
    "tag": "default",
}


def identity(file_index: int) -> dict[str, str]:
    return {**IDENTITY, "kernel": f"kernel{file_index}"}


def entry(key: tuple[Any, ...], writer: int) -> dict[str, Any]:
    config = encode_config(triton.Config({"BLOCK": 16 << (writer % 4)}, num_warps=4))
    return {
        "key": encode_key(key),
        "config": config,
        "timings_ms": [1.0, 0.9, 1.1],
        "evaluated": 4,
        "space_size": 4,
        "strategy": "exhaustive",
        "budget": None,
        "tuning_time_s": 0.1,
        "tuned_at": "2026-01-01T00:00:00+00:00",
        "candidates": "e" * 16,
        "top": [{"config": config, "timings_ms": [1.0, 0.9, 1.1]}],
        "ruled_out": [],
    }


def tasks(writer: int, rounds: int, per_round: int, files: int) -> list[tuple[int, tuple[int, int, int]]]:
    """(file index, key) of every entry a writer records, in order."""
    return [
        ((writer + r * per_round + i) % files, (writer, r, i))
        for r in range(rounds)
        for i in range(per_round)
    ]


def writer_main(writer: int, root: str, acks: str, rounds: int, per_round: int, files: int) -> None:
    log = Path(acks) / f"writer{writer}.log"
    done = set(log.read_text().split()) if log.exists() else set()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    caches = [storage.CacheFile.for_identity(Path(root), identity(f)) for f in range(files)]
    warnings.simplefilter("error", DejavuStorageWarning)  # a warning ends the writer: counted as failure
    for file_index, key in tasks(writer, rounds, per_round, files):
        kid = key_id(key)
        if kid in done:
            continue
        if not caches[file_index].record({kid: entry(key, writer)}):
            os._exit(3)
        os.write(fd, f"{kid}\n".encode())  # one write(2) of a short line: whole, or not at all
    os._exit(0)


def reader_main(root: str, files: int, stop: Any, counts: Any) -> None:
    caches = [storage.CacheFile.for_identity(Path(root), identity(f)) for f in range(files)]
    loads = problems = 0
    while not stop.is_set():
        for cf in caches:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    cf.load()
                except Exception:  # counted: a load must never raise
                    problems += 1
            problems += sum(issubclass(w.category, DejavuStorageWarning) for w in caught)
            loads += 1
    counts.put((loads, problems))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--writers", type=int, default=16, help="writer processes (N)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per writer (R)")
    parser.add_argument("--per-round", type=int, default=8, help="entries per writer and round")
    parser.add_argument("--files", type=int, default=4, help="cache files (kernels) the writers share")
    parser.add_argument("--kills", type=int, default=50, help="SIGKILLs sent to random writers (K)")
    parser.add_argument("--readers", type=int, default=4, help="reader processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=Path, help="storage root (default: a new temporary directory)")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="storage-stress-"))
    root = args.root or work / "root"
    acks = work / "acks"
    acks.mkdir()
    ctx = multiprocessing.get_context("fork")
    stop, counts = ctx.Event(), ctx.Queue()
    start = time.perf_counter()
    readers = [
        ctx.Process(target=reader_main, args=(str(root), args.files, stop, counts))
        for _ in range(args.readers)
    ]
    for r in readers:
        r.start()

    def spawn(w: int) -> multiprocessing.process.BaseProcess:
        p = ctx.Process(
            target=writer_main, args=(w, str(root), str(acks), args.rounds, args.per_round, args.files)
        )
        p.start()
        return p

    writers = {w: spawn(w) for w in range(args.writers)}
    kills = 0
    failed: list[int] = []

    def reap(w: int) -> None:
        """A writer that ended: restart it if it was killed, else retire it."""
        p = writers[w]
        p.join()
        if p.exitcode == -signal.SIGKILL:
            writers[w] = spawn(w)  # carries on with what it has not acknowledged
            return
        del writers[w]
        if p.exitcode != 0:
            failed.append(w)

    while writers:
        for w in [w for w, p in writers.items() if not p.is_alive()]:
            reap(w)
        if kills < args.kills and writers:
            time.sleep(rng.uniform(0.0, 0.04))
            w = rng.choice(list(writers))
            if writers[w].is_alive():
                os.kill(writers[w].pid, signal.SIGKILL)
                writers[w].join()
                kills += writers[w].exitcode == -signal.SIGKILL  # not if it had just finished
                reap(w)
        else:
            time.sleep(0.01)
    stop.set()
    loads = reader_problems = 0
    for _ in readers:
        n, bad = counts.get()
        loads, reader_problems = loads + n, reader_problems + bad
    for r in readers:
        r.join()
    elapsed = time.perf_counter() - start

    acknowledged: set[str] = set()
    for log in acks.iterdir():
        acknowledged.update(log.read_text().split())
    found: set[str] = set()
    unreadable = 0
    for f in range(args.files):
        path = layout.cache_path(root, identity(f))
        try:
            doc = storage.read_document(path)
        except (OSError, storage.InvalidCacheFile):
            unreadable += 1
            continue
        unreadable += len(doc.rejected)
        found.update(doc.entries)
    planned = args.writers * args.rounds * args.per_round
    lost = acknowledged - found
    names = [p.name for p in root.rglob("*") if p.is_file()]
    temp = [n for n in names if n.endswith(".tmp")]
    lock = [n for n in names if n.endswith(layout.LOCK_SUFFIX)]
    aside = [n for n in names if layout.is_aside_file(Path(n))]

    print(f"storage_stress: {args.writers} writers x {args.rounds} rounds x {args.per_round} entries "
          f"into {args.files} shared cache files, {args.readers} readers, seed {args.seed}")  # fmt: skip
    print(f"  writers killed (SIGKILL)   {kills}, each restarted")
    print(f"  entries planned            {planned}")
    print(f"  entries acknowledged       {len(acknowledged)} (record() returned True, then noted)")
    print(f"  entries found              {len(found)}")
    print(f"  lost                       {len(lost)}")
    print(f"  writers failed             {len(failed)} (record() returned False or warned)")
    print(f"  unreadable files/entries   {unreadable}")
    print(f"  reader loads               {loads}, problems seen {reader_problems}")
    print(f"  leftover temporary files   {len(temp)} (one per writer killed mid-write; the next removes it)")
    print(f"  lock files                 {len(lock)} (one per cache file, kept by design)")
    print(f"  files moved aside          {len(aside)}")
    print(f"  elapsed                    {elapsed:.1f} s")
    bad = lost or failed or unreadable or reader_problems or aside or len(found) != planned
    if not args.root:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
