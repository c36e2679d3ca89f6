"""``python -m guardrepro``: the console script (Ctrl-C while it starts is exit 130 too)."""

try:
    from guardrepro.cli import console
except KeyboardInterrupt:
    raise SystemExit(130) from None

console()
