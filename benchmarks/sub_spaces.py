"""Write sub-spaces of the two training spaces, for ``search_replay.py --full --data DIR``.

The Bayesian optimisation's settings are chosen on pnpoly_RTX_3090 and convolution_RTX_2080_Ti
only. On those whole spaces a 2% budget is already 80-135 evaluations, so how the search does
with a few dozen is seen on sub-spaces: one or two parameters fixed, 940-1,692 candidates each,
15 in all (pnpoly with ``between_method`` or ``use_method`` fixed; convolution with ``read_only``
and ``use_padding`` fixed, or with ``block_size_y`` fixed to 4, 8, 16 or 32). Each is written in
the measured spaces' format (gzip JSON, the fixed parameters keep a single value). ``--small``
writes 16 others instead, of 470-752 candidates (convolution with ``block_size_y`` and one of
``read_only``/``use_padding`` fixed), the size of the measured GPU examples' spaces.

    python benchmarks/sub_spaces.py --out /tmp/sub
    PYTHONPATH=. python benchmarks/search_replay.py --full --data /tmp/sub --no-synthetic \\
        --strategies bayesian --seeds 20 --batches 1 16 --save sub.json
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data" / "search-spaces"

#: (space, parameters fixed together); every combination of their values is one sub-space
FIXED: tuple[tuple[str, dict[str, Sequence[Any] | None]], ...] = (
    ("pnpoly_RTX_3090", {"between_method": None}),
    ("pnpoly_RTX_3090", {"use_method": None}),
    ("convolution_RTX_2080_Ti", {"read_only": None, "use_padding": None}),
    ("convolution_RTX_2080_Ti", {"block_size_y": (4, 8, 16, 32)}),
)
#: ``--small``: 16 sub-spaces of about the size of the measured GPU examples' spaces (470-752
#: candidates, four parameters varying), where the initial design's cap of a quarter of a 5% budget
#: binds (pnpoly has too few parameters for it to bind)
SMALL: tuple[tuple[str, dict[str, Sequence[Any] | None]], ...] = (
    ("convolution_RTX_2080_Ti", {"read_only": None, "block_size_y": (4, 8, 16, 32)}),
    ("convolution_RTX_2080_Ti", {"use_padding": None, "block_size_y": (4, 8, 16, 32)}),
)


def sub_spaces(
    data: Path = DATA_DIR, fixed_sets: Sequence[tuple[str, dict[str, Sequence[Any] | None]]] = FIXED
) -> list[tuple[str, dict[str, Any]]]:
    """(file name, document) of every sub-space."""
    out = []
    for space, fixed in fixed_sets:
        with gzip.open(data / f"{space}.json.gz", "rt") as handle:
            doc = json.load(handle)
        names = list(fixed)
        choices = [fixed[n] if fixed[n] is not None else doc["tune_params"][n] for n in names]
        for values in itertools.product(*choices):
            chosen = dict(zip(names, values))
            sub = {k: v for k, v in doc.items() if k != "cache"}
            sub["tune_params"] = {k: [chosen[k]] if k in chosen else v for k, v in doc["tune_params"].items()}
            sub["cache"] = {
                key: rec for key, rec in doc["cache"].items() if all(rec[k] == v for k, v in chosen.items())
            }
            tag = "-".join(f"{k}{v}" for k, v in chosen.items())
            out.append((f"{space.split('_')[0]}_{tag}.json.gz", sub))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="a directory for the sub-spaces")
    parser.add_argument("--data", type=Path, default=DATA_DIR)
    parser.add_argument("--small", action="store_true", help="the 16 small sub-spaces instead")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, doc in sub_spaces(args.data, SMALL if args.small else FIXED):
        with gzip.open(args.out / name, "wt") as handle:
            json.dump(doc, handle)
        print(f"{name}: {len(doc['cache'])} candidates")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
