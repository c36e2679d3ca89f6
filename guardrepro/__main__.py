"""``python -m guardrepro``: the console script (Ctrl-C while it starts is exit 130 too)."""

try:
    from guardrepro.cli import main

    code = main()
except KeyboardInterrupt:
    code = 130

raise SystemExit(code)
