"""Command line: `epochguard simulate | audit | demo | serve | judge | compat | watch | recover`. Each subcommand's
arguments live with its subsystem (`epochguard.sim.cli`, `epochguard.spark.cli`, `epochguard.wire.cli`,
`epochguard.ops.cli`), registered here by `build_parser`."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = """\
Kafka's leader-epoch protocol (KIP-101, KIP-320), simulated, audited and watched: run fault scenarios on
a simulated cluster or serve it to real clients; on a live cluster, watch for unclean elections that lose
committed records (from the wire alone, read-only), audit copies of the brokers' log directories for every
lost record, and recover them into the topic, exactly once."""

EPILOG = """\
exit codes: 0 clean, 1 an invariant violation / divergence / lost record was found, 2 could not run.
`epochguard COMMAND --help` describes a command."""


# Commands that never touch Spark: parsing them skips importing `epochguard.spark` (pyspark, pandas and pyarrow,
# seconds of start-up on a loaded machine, which every `epochguard serve` of the wire tests would pay).
_WITHOUT_SPARK = frozenset({"simulate", "serve", "judge", "compat", "watch", "recover"})


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; subcommands register their own arguments. Given the `command` about to be
    parsed, one that does not need Spark leaves the Spark commands out."""
    from epochguard import __version__
    from epochguard.sim.cli import configure as configure_simulate

    parser = argparse.ArgumentParser(
        prog="epochguard",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    configure_simulate(sub.add_parser("simulate", help="run a fault scenario on a simulated cluster"))
    if command not in _WITHOUT_SPARK:
        _add_spark_commands(sub)
    from epochguard.wire.cli import add_parsers as add_wire_commands

    add_wire_commands(sub)  # serve, judge
    from epochguard.wire.drivers.compat import configure as configure_compat

    configure_compat(sub.add_parser("compat", help="real clients x `serve` scenarios: the compatibility table"))
    from epochguard.ops.cli import add_parsers as add_ops_commands

    add_ops_commands(sub)  # watch, recover
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)  # top-level options take no value
    args = build_parser(command).parse_args(argv)
    return int(args.run(args))


def _add_spark_commands(sub: argparse._SubParsersAction) -> None:
    """`audit` and `demo` (epochguard.spark.cli); without the Spark extra they say how to get it."""
    try:
        from epochguard.spark import cli
    except ImportError as exc:
        for name in ("audit", "demo"):
            parser = sub.add_parser(
                name,
                help=f"(needs the Spark extra) {exc}",
                description=f"`epochguard {name}` runs on Spark, which is not installed here: {exc}",
            )
            parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARG")
            parser.set_defaults(run=lambda _args, exc=exc: print(exc, file=sys.stderr) or 2)
        return
    cli.add_parsers(sub)


if __name__ == "__main__":
    sys.exit(main())
