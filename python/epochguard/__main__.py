"""Command line: `epochguard demo | simulate | audit`."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="epochguard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="unclean election -> real log dirs -> Spark audit report")
    args = parser.parse_args(argv)
    if args.command == "demo":
        import epochguard

        print(f"epochguard {epochguard.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
