"""`epochguard watch` and `epochguard recover`: their arguments, registered by `epochguard.__main__`; each
command's work is in its own module."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from epochguard.errors import EpochGuardError

__all__ = ["add_parsers", "client_settings", "configure_watch"]

WATCH_HELP = "follow a live Kafka cluster's partitions and report every loss of committed records (read-only)"
WATCH_DESCRIPTION = """\
Follows every partition of a live cluster from the wire alone (Metadata, ListOffsets, OffsetsForLeaderEpoch,
a Fetch of batch headers) and validates its committed position at each leader-epoch change, as a KIP-320
consumer parked at the high watermark would. An unclean election that loses committed records is one
`truncation` event with the exact range; a group committed past it is a `group-affected` event with the
records it read that no longer exist (phantoms) and the replacements it will skip. Clean leader changes give
no event. Read-only (Describe on topics and groups) unless --rewind-groups.

What the wire cannot see: records above the last high watermark the watcher read (acks=1 writes no consumer
could read, or written and lost between two rounds); `epochguard audit` on the brokers' disks sees them."""
WATCH_EPILOG = """\
exit codes: 0 clean, 1 a loss of committed records was found, 2 could not run (no broker answered).
cron / Kubernetes CronJob: `epochguard watch --once --state /var/lib/epochguard/watch.json --events ...`"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    configure_watch(sub.add_parser("watch", help=WATCH_HELP))
    _add_recover(sub)


def configure_watch(parser: argparse.ArgumentParser) -> None:
    parser.description = WATCH_DESCRIPTION
    parser.epilog = WATCH_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--bootstrap-servers", "-b", required=True, metavar="HOST:PORT[,...]",
                        help="brokers to bootstrap from (Kafka's bootstrap.servers)")
    parser.add_argument("--topic", action="append", default=[], metavar="NAME|PATTERN",
                        help="a topic name or shell pattern (repeatable; default: every topic)")
    parser.add_argument("--group", action="append", default=[], metavar="NAME|PATTERN",
                        help="a consumer group name or shell pattern to check after a truncation (repeatable; "
                             "default: every consumer group, found with ListGroups)")
    parser.add_argument("--rewind-groups", action="store_true",
                        help="commit each affected group with no active member back to the divergence point "
                             "(the one write; an active group is named with the command to run once stopped)")
    parser.add_argument("--interval", type=float, default=5.0, metavar="SECONDS", help="seconds between rounds")
    parser.add_argument("--transaction-timeout-ms", type=int, default=900_000, metavar="MS",
                        help="the cluster's transaction.max.timeout.ms: a truncated partition's last stable offset "
                             "stuck below its high watermark longer than this is an lso-stuck event (default 900000)")
    parser.add_argument("--once", action="store_true", help="validate once and exit (cron); with --state")
    parser.add_argument("--state", type=Path, metavar="PATH",
                        help="positions kept between runs (written atomically after each round)")
    parser.add_argument("--events", type=Path, metavar="PATH",
                        help="append the events as JSON lines here, fsynced (default: stdout)")
    parser.add_argument("--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics on this port")
    parser.add_argument("--request-timeout-ms", type=int, default=10_000, metavar="MS",
                        help="a request without an answer in this time costs its step one round (default 10000)")
    _add_security(parser)
    parser.set_defaults(run=run_watch)


def _add_security(parser: argparse.ArgumentParser) -> None:
    """TLS and SASL, as the client's settings (`client.security`; Kafka's names in the help)."""
    parser.add_argument("--security-protocol", default="PLAINTEXT",
                        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), help="Kafka's security.protocol")
    parser.add_argument("--sasl-mechanism", choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                        help="Kafka's sasl.mechanism (default PLAIN with SASL_*)")
    parser.add_argument("--sasl-username", metavar="USER", help="the SASL user")
    parser.add_argument("--sasl-password", metavar="PASSWORD", help="the SASL password")
    parser.add_argument("--ssl-cafile", metavar="PATH", help="CA certificates to verify the brokers with")


def client_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The security flags as the client's settings (kafka-python's names), those given only."""
    given = {"security_protocol": args.security_protocol, "sasl_mechanism": args.sasl_mechanism,
             "sasl_plain_username": args.sasl_username, "sasl_plain_password": args.sasl_password,
             "ssl_cafile": args.ssl_cafile}
    return {k: v for k, v in given.items() if v is not None}


def _security(args: argparse.Namespace) -> Any:
    from epochguard.client.security import SECURITY_DEFAULTS, security_of

    return security_of({**SECURITY_DEFAULTS, **client_settings(args)})  # ValueError / OSError: refused here


def run_watch(args: argparse.Namespace) -> int:
    from rich.console import Console

    from epochguard.ops.watch import EXIT_COULD_NOT_RUN, EventLog, WatchMetrics, watch

    console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
    if args.interval <= 0:
        console.print("[red]--interval must be positive[/]")
        return EXIT_COULD_NOT_RUN
    try:
        security = _security(args)
    except (ValueError, OSError) as exc:
        console.print(f"[red]{exc}[/]")
        return EXIT_COULD_NOT_RUN
    metrics = None
    if args.metrics_port is not None:
        metrics = WatchMetrics()
        metrics.serve(args.metrics_port)
    events = EventLog(args.events)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        summary = await watch(
            args.bootstrap_servers, topics=args.topic or None, groups=args.group or None,
            rewind_groups=args.rewind_groups,
            interval_ms=int(args.interval * 1000), transaction_timeout_ms=args.transaction_timeout_ms,
            once=args.once, events=events, state_path=args.state,
            metrics=metrics, security=security, request_timeout_ms=args.request_timeout_ms,
            human=console.print, stop=stop,
        )
        lost = sum(t.lost_count for t in summary.truncations)
        console.print(
            f"watch: {summary.rounds} round(s), {summary.partitions} partition(s); {len(summary.truncations)} "
            f"truncation(s) losing {lost} committed record(s), {len(summary.groups)} group(s) affected, "
            + (f"{len(summary.lso_stuck)} stuck last stable offset(s), " if summary.lso_stuck else "")
            + f"{len(summary.warnings)} warning(s)" + ("" if summary.metadata_answered else "; no broker answered")
        )
        return summary.exit_code

    try:
        return asyncio.run(main())
    except ValueError as exc:  # a state file that is not ours
        console.print(f"[red]{exc}[/]")
        return EXIT_COULD_NOT_RUN
    finally:
        events.close()


def _add_recover(sub: argparse._SubParsersAction) -> None:
    recover = sub.add_parser(
        "recover", help="put the records an audit lists as lost back into their topic, exactly once",
        description="Re-publish the records `epochguard audit` listed as lost (AUDIT_OUT/lost_records.parquet) to "
                    "their partition (or the same partition of --to-topic), skipping those already there (an "
                    "earlier run's, by their provenance header, and those the producer retried, by key, value and "
                    "headers), with the idempotent producer, acks=all, in offset order. Writes "
                    "AUDIT_OUT/recovered.parquet. Safe to re-run. Exit 0 when every record asked for is in the "
                    "topic, 2 on an error.")
    recover.add_argument("audit_out", metavar="AUDIT_OUT", help="the audit's output directory")
    recover.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker of the cluster")
    recover.add_argument("--topic", action="append", metavar="T", help="only these topics (repeatable)")
    recover.add_argument("--to-topic", metavar="NAME", help="a quarantine topic with the same partition numbers")
    recover.add_argument("--dry-run", action="store_true", help="print what would go where; produce nothing")
    recover.add_argument("--until-offset", type=int, metavar="N", help="only lost records at offsets <= N")
    recover.add_argument("--from-epoch", type=int, metavar="N", help="only lost records of leader epochs >= N")
    recover.add_argument("--include-uncommitted", action="store_true",
                         help="also records of transactions no COMMIT marker ends in the old replica's log (the "
                              "audit's `uncommitted`: their outcome is not on its disk; left by default)")
    recover.add_argument("--transactional-id", metavar="ID",
                         help="each partition's records in one transaction (read_committed consumers see all or none)")
    _add_security(recover)
    recover.set_defaults(run=_run_recover)


def _run_recover(args: argparse.Namespace) -> int:
    from epochguard.ops.recover import recover

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    try:
        _security(args)  # settings that do not fit together are refused before anything connects
        plans = recover(args.audit_out, args.bootstrap_server, topics=args.topic, to_topic=args.to_topic,
                        dry_run=args.dry_run, until_offset=args.until_offset, from_epoch=args.from_epoch,
                        transactional_id=args.transactional_id, include_uncommitted=args.include_uncommitted,
                        client=client_settings(args))
    except (EpochGuardError, OSError, TimeoutError, ValueError) as exc:
        print(f"recover: {exc}", file=sys.stderr)
        return 2
    _print_table(plans, dry_run=args.dry_run)
    return 0


def _print_table(plans: Any, *, dry_run: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="epochguard recover" + (" (dry run: nothing produced)" if dry_run else ""))
    # Headers on two lines; nothing cut in a narrow terminal (folded instead), and piped to a log the table
    # is as wide as it needs (rich would otherwise assume 80 columns and cut names with an ellipsis).
    for name in ("partition", "lost", "already\npresent", "recovered\nbefore", "left\nuncommitted",
                 "skipped\nby limits", "would\npublish" if dry_run else "published"):
        table.add_column(name, justify="left" if name == "partition" else "right", overflow="fold")
    for tp, p in sorted(plans.items()):
        counts = [p.count(name) for name in ("already present", "recovered before", "uncommitted, left",
                                             "skipped by limits", "publish")]
        table.add_row(f"{tp.topic}-{tp.partition}", str(sum(counts)), *map(str, counts))
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    console.print(table)
