"""Command line: `epochguard demo | simulate | audit`. Each subcommand lives with its subsystem."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="epochguard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="unclean election -> real log dirs -> Spark audit report")
    demo.set_defaults(run=_demo)
    from epochguard.sim.cli import configure as configure_simulate

    configure_simulate(sub.add_parser("simulate", help="seeded cluster simulation: faults, invariants, timeline"))
    args = parser.parse_args(argv)
    return int(args.run(args))


def _demo(args: argparse.Namespace) -> int:
    import epochguard

    print(f"epochguard {epochguard.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
