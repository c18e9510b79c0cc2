"""``python -m triton_dejavu_like``: the command line."""

from .tools.cli import main

raise SystemExit(main())
