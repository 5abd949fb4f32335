"""How an audit is shown: progress while it runs, a terminal summary (rich), and report.html with
one inline SVG per partition (each replica's epochs over offsets, divergence points, lost ranges).
The report reads an `AuditResult`; `save` writes a result's Parquet tables and its report.html."""

from __future__ import annotations

import html
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from epochguard.spark.listing import is_local

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from epochguard.spark.result import AuditResult, ReplicaSummary
    from epochguard.spark.session import LazySession

KIND_STYLE = {
    "reference": "bold cyan",
    "in_sync": "green",
    "behind": "yellow",
    "retention": "blue",
    "recreated": "magenta",
    "diverged": "bold red",
    "mismatched": "bold red",
}


class AuditProgress:
    """A progress display for `audit(step=...)`: the current stage, and the Spark tasks of its jobs
    (polled from the status tracker, so it shows real work, not a guess)."""

    def __init__(self, spark: SparkSession | LazySession, console: Console) -> None:
        self._spark = spark
        self._tracker: Any = None
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("tasks"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._current: tuple[Any, str] | None = None  # the running stage's task id and name
        self._scanned = (0, 0)

    def scanned(self, batches: int, size: int) -> None:
        """Add what the header pass has read since the last call: shown on the running stage's line."""
        total = (self._scanned[0] + batches, self._scanned[1] + size)
        self._scanned = total
        if self._current is not None:
            task, name = self._current
            self._progress.update(task, description=f"{name}: {total[0]:,} batches, {total[1] / 2**20:,.1f} MiB")

    def _status_tracker(self) -> Any:
        if self._tracker is None:
            from epochguard.spark.session import LazySession

            spark = self._spark
            if isinstance(spark, LazySession) and not spark.ready:
                return None
            self._tracker = (spark.get() if isinstance(spark, LazySession) else spark).sparkContext.statusTracker()
        return self._tracker

    def __enter__(self) -> AuditProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        task = self._progress.add_task(name, total=None)
        self._current = (task, name)
        done = threading.Event()
        seen: dict[int, tuple[int, int]] = {}

        def poll() -> None:
            while not done.wait(0.2):
                tracker = self._status_tracker()
                if tracker is None:  # a LazySession not made yet: no Spark job has run
                    continue
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        seen[stage_id] = (info.numCompletedTasks, info.numTasks)
                if seen:
                    self._progress.update(
                        task, completed=sum(c for c, _ in seen.values()), total=sum(t for _, t in seen.values())
                    )

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            self._current = None
            self._progress.remove_task(task)
            batches, size = self._scanned
            scanned = f" ({batches:,} batches, {size / 2**20:,.1f} MiB)" if "header" in name else ""
            self._progress.console.print(f"[green]✓[/] {name}{scanned}")


def print_summary(result: AuditResult, console: Console | None = None, *, rows: int = 15) -> None:
    """One table per partition, then the first `rows` lost records and phantom reads (all of them
    are in the Parquet output and report.html's sample)."""
    console = console or Console()
    partitions: dict[tuple[str, int], list[ReplicaSummary]] = {}
    for r in result.replicas:
        partitions.setdefault((r.topic, r.partition), []).append(r)
    for (topic, partition), replicas in partitions.items():
        ref = replicas[0]
        table = Table(
            title=f"{topic}-{partition}  reference: broker {ref.reference_broker} "
            f"(epoch {ref.reference_latest_epoch}, log end {ref.reference_log_end_offset})",
            title_justify="left",
        )
        for column in ("broker", "kind", "epochs (epoch@start)", "log start", "log end", "diverges at", "lost", "why"):
            table.add_column(column, overflow="fold")
        for r in replicas:
            lost = f"{r.lost_count} [{r.lost_first_offset}..{r.lost_last_offset}]" if r.lost_count else "0"
            table.add_row(
                str(r.broker),
                f"[{KIND_STYLE.get(r.kind, '')}]{r.kind}[/]",
                " ".join(f"{e}@{s}" for e, s in r.epochs[-4:])
                + (f" (+{len(r.epochs) - 4})" if len(r.epochs) > 4 else ""),
                str(r.log_start_offset),
                str(r.log_end_offset),
                "-" if r.divergence_offset is None else str(r.divergence_offset),
                lost,
                r.reason,
            )
        console.print(table)
    if result.lost_sample:
        shown = result.lost_sample[:rows]
        console.print(
            _sample_table(
                f"Lost records ({result.lost_count}; first {len(shown)})",
                ("topic", "partition", "broker", "offset", "epoch", "key", "value"),
                (
                    (row["topic"], row["partition"], row["broker"], row["offset"], row["leader_epoch"],
                     _show(row["key"]), _show(row["value"]))
                    for row in shown
                ),
            )
        )
    if result.phantom_counts is not None:
        console.print(f"[bold]Phantom reads[/] (consumed, not in the reference log): {_counts(result.phantom_counts)}")
        if result.phantom_sample:
            phantoms = result.phantom_sample[:rows]
            console.print(
                _sample_table(
                    f"Phantom reads (first {len(phantoms)})",
                    ("topic", "partition", "offset", "epoch", "kind", "lost on", "why"),
                    (
                        (row["topic"], row["partition"], row["offset"], row["leader_epoch"],
                         f"[{'bold red' if row['kind'] in ('truncated', 'rewritten') else 'yellow'}]{row['kind']}[/]",
                         "-" if row["lost_on_broker"] is None else row["lost_on_broker"], row["reason"])
                        for row in phantoms
                    ),
                )
            )
    left_out = result.provenance.get("not_audited")
    if left_out:
        console.print(f"not audited: {', '.join(left_out)} (left out by --topic, or KRaft's metadata log by default)")
    verdict = {0: "[bold green]clean[/]", 1: "[bold red]data loss or unreadable input found[/]"}[result.exit_code]
    console.print(
        f"{verdict}: {len(result.diverged)} diverged replicas, {result.lost_count} lost records, "
        f"{result.mismatch_count} mismatched records, {result.phantom_loss_count} phantom reads of lost records, "
        f"{result.error_count} errors. Results: {result.out}"
    )


def _counts(counts: dict[str, int] | None) -> str:
    if counts is None:
        return "not checked (no consumed table)"
    return ", ".join(f"{kind}: {n}" for kind, n in sorted(counts.items())) or "none"


def _show(value: bytes | None, limit: int = 40) -> str:
    if value is None:
        return "null"
    text = value.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- report.html ---------------------------------------------------------------------------------

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#bab0ac", "#e15759", "#ff9da7"]
LANE, GAP, LEFT, WIDTH = 26, 10, 90, 860


def partition_svg(replicas: list[ReplicaSummary], index: int = 0) -> str:
    """Each replica a lane; its epochs as coloured spans over [log start, log end); the lost range
    hatched; its divergence point a red line."""
    lo = min(min(r.log_start_offset, r.reference_log_start_offset) for r in replicas)
    hi = max(max(r.log_end_offset, r.reference_log_end_offset) for r in replicas)
    span = max(1, hi - lo)

    def x(offset: int) -> float:
        return LEFT + (WIDTH - LEFT - 20) * (offset - lo) / span

    epochs = sorted({e for r in replicas for e, _ in r.epochs})
    color = {e: PALETTE[i % len(PALETTE)] for i, e in enumerate(epochs)}
    height = 10 + len(replicas) * (LANE + GAP) + 42  # lanes, then the axis and the legend
    pattern = f"lost-{index}"  # element ids are page-wide: one per picture
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<defs><pattern id="{pattern}" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)">'
        '<rect width="3" height="6" fill="#d62728" fill-opacity="0.75"/></pattern></defs>',
    ]
    for i, r in enumerate(replicas):
        y = 10 + i * (LANE + GAP)
        label = f"broker {r.broker}" + (" ★" if r.kind == "reference" else "")
        out.append(f'<text x="4" y="{y + LANE / 2 + 4}">{html.escape(label)}</text>')
        out.append(f'<rect x="{x(lo)}" y="{y}" width="{x(hi) - x(lo)}" height="{LANE}" fill="#f3f3f3"/>')
        for j, (epoch, start) in enumerate(r.epochs):
            end = r.epochs[j + 1][1] if j + 1 < len(r.epochs) else r.log_end_offset
            a, b = max(start, r.log_start_offset), min(end, r.log_end_offset)
            if b <= a:
                continue
            out.append(
                f'<rect x="{x(a):.1f}" y="{y}" width="{max(1.0, x(b) - x(a)):.1f}" height="{LANE}" '
                f'fill="{color[epoch]}">'
                f"<title>epoch {epoch}: offsets {a}..{b - 1}</title></rect>"
            )
            if x(b) - x(a) > 24:
                out.append(f'<text x="{x(a) + 3:.1f}" y="{y + LANE / 2 + 4}" fill="white">e{epoch}</text>')
        if r.lost_count and r.lost_first_offset is not None and r.lost_last_offset is not None:
            a, b = r.lost_first_offset, r.lost_last_offset + 1
            out.append(
                f'<rect x="{x(a):.1f}" y="{y}" width="{max(1.0, x(b) - x(a)):.1f}" height="{LANE}" '
                f'fill="url(#{pattern})">'
                f"<title>{r.lost_count} lost records, offsets {a}..{b - 1}</title></rect>"
            )
        if r.divergence_offset is not None:
            d = x(r.divergence_offset)
            out.append(
                f'<line x1="{d:.1f}" x2="{d:.1f}" y1="{y - 3}" y2="{y + LANE + 3}" stroke="#d62728" stroke-width="2"/>'
            )
            out.append(f'<text x="{d + 3:.1f}" y="{y - 1}" fill="#d62728">diverges at {r.divergence_offset}</text>')
    axis = 10 + len(replicas) * (LANE + GAP)
    out.append(f'<line x1="{x(lo)}" x2="{x(hi)}" y1="{axis}" y2="{axis}" stroke="#666"/>')
    ticks = {lo, hi} | {r.divergence_offset for r in replicas if r.divergence_offset is not None}
    for t in sorted(ticks):
        out.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{axis}" y2="{axis + 4}" stroke="#666"/>')
        out.append(f'<text x="{x(t):.1f}" y="{axis + 16}" text-anchor="middle">{t}</text>')
    legend = " ".join(f'<tspan fill="{color[e]}">■</tspan> epoch {e}' for e in epochs)
    out.append(f'<text x="{LEFT}" y="{axis + 32}">offsets → {legend}</text>')
    out.append("</svg>")
    return "\n".join(out)


def save(result: AuditResult, out: str, *, html: bool = True) -> AuditResult:
    """`result.save(out)` (the Parquet tables) and, when `out` is a local path, report.html beside
    them. Returns the result, with `out` set."""
    result.save(out)
    if html and is_local(out):
        write_html(result, os.path.join(out, "report.html"))
    return result


def write_html(result: AuditResult, path: str) -> None:
    partitions: dict[tuple[str, int], list[ReplicaSummary]] = {}
    for r in result.replicas:
        partitions.setdefault((r.topic, r.partition), []).append(r)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>epochguard audit</title><style>"
        "body{font-family:sans-serif;margin:2em;max-width:1000px}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}"
        "</style></head><body><h1>epochguard audit</h1>",
        f"<p>{len(partitions)} partitions, {len(result.diverged)} diverged replicas, {result.lost_count} lost records, "
        f"{result.mismatch_count} mismatched records, "
        f"{result.error_count} errors; phantom reads: {html.escape(_counts(result.phantom_counts))}.</p>",
        _provenance_html(result.provenance),
    ]
    for index, ((topic, partition), replicas) in enumerate(partitions.items()):
        parts.append(f"<h2>{html.escape(topic)}-{partition}</h2>")
        parts.append(partition_svg(replicas, index))
        parts.append(
            _html_table(
                ["broker", "kind", "log start", "log end", "latest epoch", "diverges at", "lost", "why"],
                [
                    [
                        r.broker,
                        r.kind,
                        r.log_start_offset,
                        r.log_end_offset,
                        r.latest_epoch,
                        r.divergence_offset,
                        f"{r.lost_count}" + (f" [{r.lost_first_offset}..{r.lost_last_offset}]" if r.lost_count else ""),
                        r.reason,
                    ]
                    for r in replicas
                ],
            )
        )
    if result.lost_sample:
        parts.append(f"<h2>Lost records (first {len(result.lost_sample)} of {result.lost_count})</h2>")
        parts.append(
            _html_table(
                ["topic", "partition", "broker", "offset", "epoch", "key", "value"],
                [
                    [
                        r["topic"],
                        r["partition"],
                        r["broker"],
                        r["offset"],
                        r["leader_epoch"],
                        _show(r["key"]),
                        _show(r["value"]),
                    ]
                    for r in result.lost_sample
                ],
            )
        )
    if result.phantom_sample:
        parts.append(f"<h2>Phantom reads (first {len(result.phantom_sample)})</h2>")
        parts.append(
            _html_table(
                ["topic", "partition", "offset", "epoch", "kind", "lost on", "why"],
                [
                    [
                        r["topic"],
                        r["partition"],
                        r["offset"],
                        r["leader_epoch"],
                        r["kind"],
                        r["lost_on_broker"],
                        r["reason"],
                    ]
                    for r in result.phantom_sample
                ],
            )
        )
    parts.append("</body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))


def _provenance_html(provenance: dict[str, Any]) -> str:
    """Where the inputs came from: log dirs, epochguard version, time and Spark master."""
    dirs = "".join(f"<li><code>{html.escape(str(d))}</code></li>" for d in provenance.get("log_dirs", []))
    facts = ", ".join(
        f"{label} <code>{html.escape(str(provenance.get(key)))}</code>"
        for label, key in (
            ("epochguard", "epochguard_version"),
            ("started", "started_at"),
            ("Spark master", "spark_master"),
            ("Spark", "spark_version"),
        )
    )
    return f"<p>Audited: {facts}. Log dirs:</p><ul>{dirs}</ul>"


def _html_table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{'-' if v is None else html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _sample_table(title: str, columns: tuple[str, ...], rows: Iterable[tuple[object, ...]]) -> Table:
    """A left-titled table of sample rows; long cells fold instead of being cut."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    return table
