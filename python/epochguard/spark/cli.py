"""`epochguard audit` and `epochguard demo`. Argument parsing imports nothing heavy; Spark starts
only when a command runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import rich.console

    from epochguard.spark.session import LazySession

EXIT_CLEAN, EXIT_FOUND, EXIT_FAILED = 0, 1, 2


def add_parsers(sub: Any) -> None:
    """Register the `audit` and `demo` subcommands on the main parser's subparsers."""
    audit = sub.add_parser(
        "audit",
        help="find the records an unclean leader election lost, from the brokers' log dirs",
        description="Audit Kafka broker log directories (one per broker) for divergence after an unclean "
        "leader election: where replicas diverged, which records were lost, and (with --consumed) which "
        "of them a consumer had read. Writes Parquet tables and report.html to --out. Exit code: 0 clean, "
        "1 divergence / phantom read of a lost record / unreadable data found, 2 could not run.",
    )
    audit.add_argument(
        "log_dirs", nargs="+", metavar="LOGDIR", help="a broker's log directory (local path or Hadoop URI)"
    )
    audit.add_argument(
        "--out",
        default="audit-out",
        metavar="DIR",
        help="where the Parquet results and report.html go (default: ./audit-out)",
    )
    audit.add_argument(
        "--consumed",
        metavar="PATH",
        help="what a consumer read: Parquet or CSV with topic, partition, offset, leader_epoch",
    )
    audit.add_argument("--master", default="local[2]", metavar="URL", help="Spark master URL (default: local[2])")
    audit.add_argument("--json", action="store_true", help="print the summary as JSON instead of tables")
    audit.add_argument(
        "--method",
        choices=("batches", "records"),
        default="batches",
        help="compare batch headers and decode only what does not line up (default), or decode and compare "
        "every record (slower, same results)",
    )
    audit.add_argument(
        "--verify-crc",
        action="store_true",
        help="with --method batches, also read the batches where the replicas line up, to check each one's CRC-32C "
        "(reads every byte). By default the batches that are decoded and, as Kafka's recovery on restart, those "
        "past each replica's recovery point (all of a replica without one) are checked: a batch corrupted on disk "
        "below the recovery point where the replicas agree goes unnoticed",
    )
    audit.add_argument(
        "--local-bytes",
        type=_size,
        default=None,
        metavar="BYTES",
        help="what the driver may decode at once before handing the divergent part to Spark's jobs (default: "
        "1/16 of the machine's memory, 64 MiB to 1 GiB; suffixes k, m, g; 0: always Spark). The divergent batches "
        "are compared a window of offsets at a time, so a large loss stays on the driver",
    )
    audit.add_argument(
        "--topic",
        action="append",
        metavar="T",
        help="only these topics: names or shell patterns ('orders-*'), repeatable (default: every topic but KRaft's "
        "metadata log, __cluster_metadata, which Raft replicates: no unclean election loses from it)",
    )
    audit.set_defaults(run=run_audit)

    demo = sub.add_parser(
        "demo",
        help="unclean election -> real log dirs -> Spark audit report",
        description="Stage an unclean leader election in the simulator, write the brokers' real Kafka log "
        "dirs and what a consumer read, then audit them with Spark: shows the records the election lost "
        "and which of them the consumer had already read. Exit code: 0 shown, 2 could not run.",
    )
    demo.add_argument(
        "--out",
        default="demo-out",
        metavar="DIR",
        help="where the log dirs and the audit go (default: ./demo-out)",
    )
    demo.add_argument("--master", default="local[2]", metavar="URL", help="Spark master URL (default: local[2])")
    demo.add_argument("--seed", type=int, default=7, metavar="N", help="seed of the simulated cluster (default: 7)")
    demo.add_argument("--json", action="store_true", help="print the audit summary as JSON")
    demo.set_defaults(run=run_demo)


def run_audit(args: argparse.Namespace) -> int:
    console = _console(stderr=args.json)  # with --json, stdout carries only the JSON
    try:
        result = _audit(
            args.log_dirs,
            args.out,
            args.consumed,
            args.master,
            console,
            args.method,
            verify_crc=args.verify_crc,
            local_bytes=args.local_bytes,
            topics=args.topic,
        )
    except Exception as exc:  # the CLI boundary: any failure to run is exit code 2, with its reason
        console.print(f"[bold red]audit could not run:[/] {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    _show(result, args.json, console)
    return result.exit_code


def run_demo(args: argparse.Namespace) -> int:
    from epochguard.spark.demo import write_demo
    from epochguard.spark.session import LazySession

    console = _console(stderr=args.json)
    try:
        session = LazySession(args.master).start()  # the audit reads what the consumer read: Spark's job
        with console.status("simulating an unclean leader election"):
            scenario = write_demo(args.out, seed=args.seed)
        console.print(scenario.description)
        result = _audit(scenario.log_dirs, scenario.audit_out, scenario.consumed, session, console)
    except Exception as exc:
        console.print(f"[bold red]demo could not run:[/] {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    _show(result, args.json, console)
    lost_partitions = ", ".join(
        f"{r.topic}-{r.partition} on broker {r.broker}: offsets {r.lost_first_offset}..{r.lost_last_offset}"
        for r in result.diverged
    )
    console.print(
        f"[bold]The unclean election lost {result.lost_count} records[/] ({lost_partitions or 'none'}); "
        f"the consumer had already read {result.phantom_loss_count} of them. "
        f"HTML report: {scenario.audit_out}/report.html"
    )
    return EXIT_CLEAN  # the demo succeeds by showing the loss it staged


def _audit(
    log_dirs: list[str],
    out: str,
    consumed: str | None,
    master: str | LazySession,
    console: Any,
    method: str = "batches",
    *,
    verify_crc: bool = False,
    local_bytes: int | None = None,
    topics: list[str] | None = None,
) -> Any:
    from epochguard.spark.auditing import LOCAL_BYTES, audit
    from epochguard.spark.report import AuditProgress
    from epochguard.spark.session import LazySession

    spark = master if isinstance(master, LazySession) else LazySession(master)
    if needs_spark(log_dirs, consumed, method):
        spark.start()  # the JVM starts while the headers are scanned
    with AuditProgress(spark, console) as progress:
        return audit(
            spark,
            log_dirs,
            consumed=consumed,
            out=out,
            step=progress,
            method=method,
            verify_crc=verify_crc,
            local_bytes=LOCAL_BYTES if local_bytes is None else local_bytes,
            topics=topics,
        )


def _size(text: str) -> int:
    """A byte count: digits, optionally followed by k, m or g (binary units)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    number, unit = (text[:-1], units[text[-1].lower()]) if text[-1:].lower() in units else (text, 1)
    try:
        value = int(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r} (e.g. 512m)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a size cannot be negative: {text!r}")
    return value


def needs_spark(log_dirs: list[str], consumed: str | None, method: str) -> bool:
    """Whether an audit will surely run Spark: a consumed table (read and joined in Spark), the
    record-level method, or a path with a scheme (Hadoop). Otherwise the audit asks for the session
    only if the divergent part exceeds the driver's budget; an audit done on the driver never starts
    the JVM."""
    from epochguard.spark.listing import is_local

    return consumed is not None or method != "batches" or not all(is_local(d) for d in log_dirs)


def _show(result: Any, as_json: bool, console: Any) -> None:
    from epochguard.spark.report import print_summary

    if as_json:
        sys.stdout.write(result.to_json() + "\n")
    else:
        print_summary(result, console)


def _console(*, stderr: bool) -> rich.console.Console:
    """Rich falls back to 80 columns when output is not a terminal (CI logs, `make demo | tee`),
    which wraps the report's tables; give it room there."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 120)
