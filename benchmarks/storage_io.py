"""What a cache file costs as it grows: recording one new key (lock, re-read, validate, merge,
write, fsync, rename) and loading the file (once per kernel per process).

"record" is a writer recording key after key (it knows the file it wrote last: no parse, only the
new entry serialized); "record, cold" is a writer that has not read the file yet, or finds it
changed by another process (a parse, then a whole dump the first time).

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

from triton_dejavu_like import store as storage
from triton_dejavu_like.codec import encode_config, encode_key, key_id
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
    columns = ("record ms", "record, cold ms", "load ms")
    print(f"{'keys':>6} {'file KiB':>9} " + " ".join(f"{c:>{len(c)}} {'ratio':>6}" for c in columns))
    base: tuple[float, ...] | None = None
    for size in args.keys:
        cf = storage.CacheFile.for_identity(root / str(size), IDENTITY)
        cf.record(entries(range(size)))
        path = cf.path

        def new_key(i: int, writer: storage.CacheFile) -> None:
            writer.record(entries(range(10**6 + i, 10**6 + i + 1)))

        record = median_ms(lambda i, cf=cf: new_key(i, cf), args.repeat)
        cold = median_ms(lambda i, p=path: new_key(10**5 + i, storage.CacheFile(p, IDENTITY)), args.repeat)
        load = median_ms(lambda _, p=path: storage.CacheFile(p, IDENTITY).load(), args.repeat)
        times = (record, cold, load)
        base = base or times
        kib = path.stat().st_size / 1024
        cells = " ".join(f"{t:>{len(c)}.2f} {t / b:>6.1f}" for c, t, b in zip(columns, times, base))
        print(f"{size:>6} {kib:>9.1f} {cells}")


if __name__ == "__main__":
    main()
