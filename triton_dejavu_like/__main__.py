"""``python -m triton_dejavu_like``: the command line."""

from .cli import main

raise SystemExit(main())
