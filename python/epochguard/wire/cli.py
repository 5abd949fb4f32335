"""`epochguard serve SCENARIO` and `epochguard judge TRACE`: parser setup and output.

serve prints `bootstrap H:P,H:P,H:P` first, `trigger` when the scenario's faults start (its client
trigger was met or timed out), `settled` once the scenario's faults have fired and the cluster has
healed, `stuck-bound` once the judge's stuck bound has passed since (in server steps: every divergence
is decided by then), and, after SIGTERM/SIGINT, a table per client; with --json the last stdout line is
the result object. judge prints the same from a trace, by replaying it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from epochguard.wire.scenarios import SCENARIOS, build
from epochguard.wire.triggers import TRIGGERS

__all__ = ["add_parsers", "format_table"]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve", help="the simulated cluster on the Kafka wire: point real clients at it",
        description="Run a simulated 3-broker cluster behind the real Kafka protocol on 127.0.0.1 and judge the "
                    "clients you point at it. The first line printed is `bootstrap HOST:PORT,...`; `settled` follows "
                    "once the scenario's faults have fired and the cluster has healed. Stop it with Ctrl-C or SIGTERM "
                    "to get each client's verdicts (detected / reset / silent / stuck / undetectable per "
                    "divergence).")
    serve.add_argument("scenario", choices=sorted(SCENARIOS), help="which faults the cluster goes through")
    serve.add_argument("--trigger", choices=TRIGGERS, default="served",
                       help="when the scenario's faults fire: the clients were served the log end (served), "
                            "then also got an empty fetch there (caught-up), committed (commit), got an acks=all ack")
    serve.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the simulated cluster")
    serve.add_argument("--trace", metavar="PATH", help="write every request, response and fault here (JSON lines)")
    serve.add_argument("--json", action="store_true", help="the last stdout line is the result as JSON")
    serve.add_argument("--host", default="127.0.0.1", metavar="H", help="address to listen on")
    serve.add_argument("--port", type=int, default=0, metavar="P",
                       help="first broker's port (the others follow); 0 = ephemeral")
    serve.add_argument("--timeout-s", type=float, default=30.0, metavar="S",
                       help="fire the faults anyway after waiting this long for the trigger, counted from when "
                            "every expected consumer (--consumers) has fetched (4x this if one never does)")
    serve.add_argument("--consumers", type=int, default=1, metavar="N",
                       help="served/caught-up triggers wait until at least N consumers fetch the trigger partition")
    serve.set_defaults(run=_serve)
    judge = sub.add_parser(
        "judge", help="re-judge a recorded `serve --trace` run offline (replays it)",
        description="Replay a trace written by `epochguard serve --trace` against a fresh simulated cluster, check "
                    "that every answer comes out byte-identical, and print the same verdicts per client.")
    judge.add_argument("trace", help="the JSON-lines trace file")
    judge.add_argument("--json", action="store_true", help="the last stdout line is the verdicts as JSON")
    judge.set_defaults(run=_judge)


def _serve(args: argparse.Namespace) -> int:
    from epochguard.wire.server import WireServer, serve_until_signalled

    def event(kind: str, detail: dict[str, Any]) -> None:
        if kind in ("trigger", "settled", "stuck-bound"):  # faults start; fired and healed; all decided
            print(kind, flush=True)

    server = WireServer(build(args.scenario), seed=args.seed, trigger=args.trigger, trace_path=args.trace,
                        host=args.host, port=args.port, timeout_s=args.timeout_s,
                        min_consumers=args.consumers, on_event=event)
    result = asyncio.run(serve_until_signalled(server, lambda b: print(f"bootstrap {b}", flush=True)))
    print(format_table(result["clients"]))
    if args.json:
        print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


def _judge(args: argparse.Namespace) -> int:
    from epochguard.errors import EpochGuardError
    from epochguard.wire.replay import replay
    from epochguard.wire.trace import read_trace

    try:
        config = next(iter(read_trace(args.trace)))
        judge = replay(args.trace)
    except (OSError, EpochGuardError) as exc:
        print(f"epochguard judge: {exc}", file=sys.stderr)
        return 2
    clients = judge.report()
    print(format_table(clients))
    if args.json:
        print(json.dumps({"scenario": config.get("scenario"), "seed": config.get("seed"),
                          "trigger": config.get("trigger"), "clients": clients}, separators=(",", ":")))
    return 0


def _false_alarm_line(x: dict[str, Any]) -> str:
    if x.get("from") == "follower-reset":
        why = f"reset after a follower's OFFSET_OUT_OF_RANGE at {x['served_end']} (nothing diverged)"
    else:
        why = f"an OffsetsForLeaderEpoch answer of {x['answer']} (served to {x['served_end']}, nothing diverged)"
    return f"  false alarm on {x['topic']}-{x['partition']}: {why}, fetched at {x['offset']}"


def format_table(clients: list[dict[str, Any]]) -> str:
    lines = []
    for c in clients:
        lines.append(f"client {c['client_id']} ({c['software']}): {c['requests']} requests, "
                     f"{c['connections']} connections; epochs sent in {sorted(c['epochs_sent']) or 'nothing'}")
        if not c["divergences"]:
            lines.append("  no divergence event")
        for d in c["divergences"]:
            lines.append(f"  {d['topic']}-{d['partition']} diverged at {d['offset']} (served to {d['served_end']}, "
                         f"epoch {d['served_epoch']}): {_verdict_text(d)} - {d['detail']}")
        for m in c["metadata_epoch_backwards"]:
            lines.append(f"  metadata epoch went backwards ({m['api']}): {m['message']}")
        for x in c["commits"]:
            lines.append(f"  commit {x['topic']}-{x['partition']}@{x['offset']}: {x['problem']}")
        lines.extend(_false_alarm_line(x) for x in c.get("false_alarms", ()))
        lines.extend(f"  OFFSET_OUT_OF_RANGE from follower {x['broker']} on {x['topic']}-{x['partition']}@"
                     f"{x['offset']}: {x['how'] or 'undecided'} - {x['detail']}"
                     for x in c.get("follower_out_of_range", ()))
        for x in c.get("stalls", ()):
            lines.append(f"  stalled on {x['topic']}-{x['partition']}: nothing new past {x['served_end']} from step "
                         f"{x['served_at']} while it kept asking until step {x['asked_until']}")
        for x in c.get("storms", ()):
            lines.append(f"  {x['api']} storm on {x['topic']}-{x['partition']}: {x['requests']} requests within "
                         f"{x['within_steps']} steps")
        for x in c["acks_lost"]:
            lines.append(f"  acks=all batch lost: {x['topic']}-{x['partition']}@{x['offset']}")
        for x in c["offset_not_available"]:
            lines.append(f"  OFFSET_NOT_AVAILABLE on {x['topic']}-{x['partition']}: then {x['then']}")
        lines += _anomaly_lines(c.get("anomalies", ()))
    return "\n".join(lines) if lines else "no client connected"


def _anomaly_lines(anomalies: Any) -> list[str]:
    """`  anomaly phantom-read on events-0: 2 at 25 (55 records)`: per name and partition, how many, where
    the first was, how many records or batches in all."""
    grouped: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for a in anomalies:
        label = f"{a['anomaly']}/{a['tag']}" if a.get("tag") else a["anomaly"]
        grouped.setdefault((label, a["topic"], a["partition"]), []).append(a)
    return [f"  anomaly {label} on {topic}-{partition}: {len(xs)} from {xs[0]['offset']} "
            f"({sum(x['count'] for x in xs)} in all)" for (label, topic, partition), xs in grouped.items()]


def _verdict_text(d: dict[str, Any]) -> str:
    """`DETECTED (rewound, 3 redelivered)`, `SILENT (12 skipped)`."""
    notes = [d["how"]] if d.get("how") else []
    notes += [f"{d[k]} {k}" for k in ("redelivered", "skipped") if d.get(k)]
    notes += [f"spinning: {d['spin']}"] if d.get("spin") else []
    return d["verdict"].upper() + (f" ({', '.join(notes)})" if notes else "")
