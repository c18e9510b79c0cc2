"""What a cache file costs as it grows: recording one new key (lock, re-read, validate, merge,
write, fsync, rename) and loading the file (once per kernel per process).

Entries have the shape the autotuner writes (a config, three timings, one top-k and one ruled-out
config). Times are medians over the repetitions; the ratio column compares with the smallest file.

    python benchmarks/storage_io.py [--keys 10 100 1000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import triton

from triton_dejavu_like.codec import encode_config, encode_key, key_id
from triton_dejavu_like.store import cache_file as storage
from triton_dejavu_like.store import layout

IDENTITY = {name: "bench" for name in layout.IDENTITY_FIELDS}


def entry(n: int) -> dict:
    config = encode_config(triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4))
    timings = [0.041, 0.040, 0.043]
    return {
        "key": encode_key((n, n, 512, "torch.float16", "torch.float16", "torch.float16")),
        "config": config,
        "timings_ms": timings,
        "evaluated": 24,
        "space_size": 24,
        "strategy": "exhaustive",
        "budget": None,
        "tuning_time_s": 3.2,
        "tuned_at": "2025-03-01T10:00:00+00:00",
        "candidates": "0" * 16,
        "top": [{"config": config, "timings_ms": timings}],
        "ruled_out": [{"config": config, "reason": "OutOfResources: shared memory"}],
    }


def entries(numbers: range) -> dict:
    return {key_id((n, n, 512, "torch.float16", "torch.float16", "torch.float16")): entry(n) for n in numbers}


def median_ms(action, repeat: int) -> float:
    times = []
    for i in range(repeat):
        start = time.perf_counter()
        action(i)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="storage_io-"))
    print(f"{'keys':>6} {'file KiB':>9} {'record ms':>10} {'ratio':>6} {'load ms':>9} {'ratio':>6}")
    base: tuple[float, float] | None = None
    for size in args.keys:
        cf = storage.CacheFile.for_identity(root / str(size), IDENTITY)
        cf.record(entries(range(size)))
        record = median_ms(lambda i, cf=cf: cf.record(entries(range(10**6 + i, 10**6 + i + 1))), args.repeat)
        load = median_ms(lambda _, path=cf.path: storage.CacheFile(path, IDENTITY).load(), args.repeat)
        base = base or (record, load)
        kib = cf.path.stat().st_size / 1024
        ratios = f"{record / base[0]:>6.1f} {load:>9.2f} {load / base[1]:>6.1f}"
        print(f"{size:>6} {kib:>9.1f} {record:>10.2f} {ratios}")


if __name__ == "__main__":
    main()
