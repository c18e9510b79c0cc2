"""What a never-tuned key costs with tuning off: the nearest stored key, by a scan and by the index.

A serving process with tuning off answers each new key (a new batch size, say) by the nearest
stored key of the kernel, under the kernel's lock. The straightforward way scans every stored entry
in Python; the tuner builds a :class:`~triton_dejavu_like.tuner.nearest.KeyIndex` once per state of
the kernel's entries and compares only the keys of the miss's group, with numbers log-scaled once.
This script times both on synthetic stores (keys ``(M, N, dtype, dtype)``, three dtypes, eight
configs), checks that both choose the same entry for every miss, and prints the ratio.

    python benchmarks/nearest_key.py                      # 1,000 and 5,000 stored keys
    python benchmarks/nearest_key.py --keys 100 20000 --misses 500
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton

from triton_dejavu_like.codec import config_id, encode_config, encode_key, key_id
from triton_dejavu_like.store import StoredEntry
from triton_dejavu_like.tuner.nearest import RestoredEntries, alike, distance, nearest

DTYPES = ("torch.float16", "torch.bfloat16", "torch.float32")
CONFIGS = [
    triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=4) for m in (32, 64, 128, 256) for n in (64, 128)
]


def scan(key, entries, candidates, config_id_of):
    """The nearest stored entry by a scan of every entry (the tuner's way before the index)."""
    by_id = alike(candidates, config_id_of)
    best = None
    for entry in entries:
        if entry.config_id not in by_id:
            continue
        d = distance(key, entry.key)
        if d is None:
            continue
        if best is None or (d, entry.key_id) < best[:2]:
            best = (d, entry.key_id, entry)
    return None if best is None else (best[2], best[2].chosen_among(by_id[best[2].config_id]))


def entry_for(key, config):
    data = {
        "key": encode_key(key),
        "config": encode_config(config),
        "timings_ms": [1.0, 0.9, 1.1],
        "evaluated": len(CONFIGS),
        "space_size": len(CONFIGS),
        "strategy": "exhaustive",
        "tuning_time_s": 1.0,
        "tuned_at": "2026-01-01T00:00:00+00:00",
    }
    return StoredEntry.from_json(key_id(key), data)


def store(n, rng):
    entries = RestoredEntries()
    while len(entries) < n:
        dtype = rng.choice(DTYPES)
        key = (rng.randrange(1, 1 << 15), rng.choice((1024, 4096, 11008)), dtype, dtype)
        entries[key_id(key)] = entry_for(key, rng.choice(CONFIGS))
    return entries


def per_miss(fn, keys):
    start = time.perf_counter()
    for key in keys:
        fn(key)
    return (time.perf_counter() - start) / len(keys)


def run(n, misses, seed):
    rng = random.Random(seed)
    entries = store(n, rng)
    keys = [
        (rng.randrange(1, 1 << 16), rng.choice((1024, 2048, 4096)), d, d)
        for d in rng.choices(DTYPES, k=misses)
    ]
    values = list(entries.values())
    start = time.perf_counter()
    index = entries.key_index()
    build = time.perf_counter() - start
    before = per_miss(lambda key: scan(key, values, CONFIGS, config_id), keys)
    after = per_miss(lambda key: nearest(key, index, CONFIGS, config_id), keys)
    same = all(
        scan(key, values, CONFIGS, config_id)[0] is nearest(key, index, CONFIGS, config_id)[0] for key in keys
    )
    print(
        f"{n:>7} stored keys: scan {before * 1e3:8.3f} ms/miss, index {after * 1e3:8.3f} ms/miss, "
        f"{before / after:7.1f}x faster (index built once in {build * 1e3:.1f} ms); same choice: {same}"
    )
    return same


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--misses", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ok = [run(n, args.misses, args.seed) for n in args.keys]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
