"""``python -m guardrepro``: the console script."""

from guardrepro.cli import main

raise SystemExit(main())
