"""The `ops` commands' parsers (`epochguard recover`); each command's work is in its own module."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from epochguard.errors import EpochGuardError


def add_parsers(sub: argparse._SubParsersAction) -> None:
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
    recover.add_argument("--transactional-id", metavar="ID",
                         help="each partition's records in one transaction (read_committed consumers see all or none)")
    recover.set_defaults(run=_run_recover)


def _run_recover(args: argparse.Namespace) -> int:
    from epochguard.ops.recover import recover

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    try:
        plans = recover(args.audit_out, args.bootstrap_server, topics=args.topic, to_topic=args.to_topic,
                        dry_run=args.dry_run, until_offset=args.until_offset, from_epoch=args.from_epoch,
                        transactional_id=args.transactional_id)
    except (EpochGuardError, OSError, TimeoutError, ValueError) as exc:
        print(f"recover: {exc}", file=sys.stderr)
        return 2
    _print_table(plans, dry_run=args.dry_run)
    return 0


def _print_table(plans: Any, *, dry_run: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="epochguard recover" + (" (dry run: nothing produced)" if dry_run else ""))
    for name in ("partition", "lost", "already present", "recovered before", "skipped by limits",
                 "would publish" if dry_run else "re-published"):
        table.add_column(name, justify="left" if name == "partition" else "right")
    for tp, p in sorted(plans.items()):
        lost = len(p.publish) + len(p.already_present) + len(p.recovered_before) + len(p.skipped_by_limits)
        table.add_row(f"{tp.topic}-{tp.partition}", str(lost), str(len(p.already_present)),
                      str(len(p.recovered_before)), str(len(p.skipped_by_limits)), str(len(p.publish)))
    Console().print(table)
