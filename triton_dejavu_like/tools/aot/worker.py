"""A local tuning worker process: ``python -m triton_dejavu_like.tools.aot.worker``.

It loads the SPEC, then reads case names from stdin, one JSON string a line (a name may hold any
character, spaces and line breaks included), runs each into its own storage root and answers one
JSON line per case on the results descriptor (``--fd``): ``{"kind": "ready"}`` first, then
``{"kind": "result", "result": {...}}`` per case, or ``{"kind": "error", ...}`` if the
SPEC cannot be loaded. stdout stays free for the user's code (``TRITON_PRINT_AUTOTUNING``, prints).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from .case import SpecError, load_cases
from .run import run_case


def _send(out: IO[str], message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triton_dejavu_like.tools.aot.worker")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--fd", required=True, type=int, help="the descriptor results are written to")
    parser.add_argument("--name", required=True, help="this worker's name in reports")
    args = parser.parse_args(argv)
    with os.fdopen(args.fd, "w", encoding="utf-8") as out:
        try:
            cases = {case.name: case for case in load_cases(args.spec)}
        except SpecError as exc:
            _send(out, {"kind": "error", "message": str(exc)})
            return 1
        _send(out, {"kind": "ready"})
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                name = json.loads(line)
            except ValueError:
                name = line.strip()
            if not isinstance(name, str) or name not in cases:
                _send(out, {"kind": "error", "message": f"the SPEC has no case {name!r} in this process"})
                return 1
            result = run_case(cases[name], args.root, worker=args.name)
            _send(out, {"kind": "result", "result": result.to_json()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
