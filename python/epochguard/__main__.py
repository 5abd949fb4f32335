"""Command line: `epochguard demo | simulate | audit`. Each subcommand lives with its subsystem."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="epochguard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_spark_commands(sub)
    from epochguard.sim.cli import configure as configure_simulate

    configure_simulate(sub.add_parser("simulate", help="seeded cluster simulation: faults, invariants, timeline"))
    from epochguard.wire.cli import add_parsers as add_wire_commands

    add_wire_commands(sub)  # serve, judge
    args = parser.parse_args(argv)
    return int(args.run(args))


def _add_spark_commands(sub: argparse._SubParsersAction) -> None:
    """`audit` and `demo` (epochguard.spark.cli); without the Spark extra they say how to get it."""
    try:
        from epochguard.spark import cli
    except ImportError as exc:
        for name in ("audit", "demo"):
            parser = sub.add_parser(name, help=f"(needs the Spark extra) {exc}")
            parser.add_argument("args", nargs=argparse.REMAINDER)
            parser.set_defaults(run=lambda _args, exc=exc: print(exc, file=sys.stderr) or 2)
        return
    cli.add_parsers(sub)


if __name__ == "__main__":
    sys.exit(main())
