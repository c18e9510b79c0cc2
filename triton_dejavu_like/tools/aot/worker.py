"""A local tuning worker process (``python -m triton_dejavu_like.tools.aot.worker``; the pool starts it
through :func:`.pool.worker_argv`, which also catches an interrupt during the imports).

It loads the SPEC, then reads case names from stdin, one JSON string a line (a name may hold any
character, spaces and line breaks included), runs each into its own storage root and answers one
JSON line per case on the results descriptor (``--fd``): ``{"kind": "ready"}`` first, then
``{"kind": "result", "result": {...}}`` per case, or ``{"kind": "error", ...}`` if the
SPEC cannot be loaded. The package's warnings go there too (``{"kind": "warning", ...}``): the
driver issues them, once for all its workers. stdout stays free for the user's code
(``TRITON_PRINT_AUTOTUNING``, prints).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from ..._log import DejavuWarning, encode_warning, relay_warnings
from .case import SpecError, load_cases
from .run import run_case, tuning_into


class _Channel:
    """The results descriptor: one JSON message a line, written whole (warnings may come from any
    thread of the worker)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self._lock:
            self.out.write(json.dumps(message) + "\n")
            self.out.flush()

    def warning(
        self, category: type[DejavuWarning], subject: str, message: str, args: tuple[Any, ...]
    ) -> None:
        """Send a warning to the driver (:func:`~triton_dejavu_like._log.encode_warning`)."""
        with contextlib.suppress(OSError, ValueError):  # a daemon thread's, after the worker closed it
            self.send({"kind": "warning", **encode_warning(category, subject, message, args)})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triton_dejavu_like.tools.aot.worker")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--fd", required=True, type=int, help="the descriptor results are written to")
    parser.add_argument("--name", required=True, help="this worker's name in reports")
    args = parser.parse_args(argv)
    with os.fdopen(args.fd, "w", encoding="utf-8") as out:
        channel = _Channel(out)
        relay_warnings(channel.warning)  # also those of loading the SPEC (a kernel's decoration)
        try:
            with tuning_into(args.root):  # a kernel launched while the SPEC loads stores into the root
                cases = {case.name: case for case in load_cases(args.spec)}
        except SpecError as exc:
            channel.send({"kind": "error", "message": str(exc)})
            return 1
        channel.send({"kind": "ready"})
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                name = json.loads(line)
            except ValueError:
                name = line.strip()
            if not isinstance(name, str) or name not in cases:
                channel.send({"kind": "error", "message": f"the SPEC has no case {name!r} in this process"})
                return 1
            result = run_case(cases[name], args.root, worker=args.name)
            channel.send({"kind": "result", "result": result.to_json()})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C in a terminal reaches the whole group: the command reports it
        sys.exit(130)
