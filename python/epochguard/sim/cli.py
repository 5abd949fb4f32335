"""`epochguard simulate`: run a scenario, print its timeline (or JSON); exit 1 when an invariant broke."""

from __future__ import annotations

import argparse
import json
import sys

from epochguard.sim.scenarios import PROTOCOLS, SCENARIOS, SimulationResult, run_scenario


def configure(p: argparse.ArgumentParser) -> None:
    """Arguments of `epochguard simulate` (the parser is made by `epochguard.__main__`)."""
    p.description = "Run a seeded fault scenario on a simulated cluster and check the leader-epoch invariants after every step."
    p.add_argument("--scenario", required=True, choices=list(SCENARIOS), help="the fault scenario")
    p.add_argument("--seed", type=int, default=0, help="seed of every delay, drop and random fault (default 0)")
    p.add_argument("--protocol", choices=list(PROTOCOLS), default="kip-320",
                   help="kip-320 (epochs, the default) or pre-kip-320 (offsets only)")
    p.add_argument("--steps", type=int, default=None, help="number of steps (default: the scenario's)")
    p.add_argument("--partitions", type=int, default=None, help="partitions of the topic (default: the scenario's)")
    p.add_argument("--log-dir", default=None, help="keep every broker's Kafka log dir here (broker-<id>/, must be new)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        result = run_scenario(args.scenario, seed=args.seed, protocol=args.protocol, steps=args.steps,
                              partitions=args.partitions, log_dir=args.log_dir)
    except (FileExistsError, ValueError) as e:
        print(f"epochguard simulate: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_timeline(result)
    return 1 if result.violations else 0


def print_timeline(result: SimulationResult, out=None) -> None:  # noqa: ANN001
    out = out or sys.stdout
    print(f"scenario {result.scenario}  seed {result.seed}  protocol {result.protocol}  steps {result.steps}", file=out)
    for event in result.events:
        if event.kind not in ("consume", "ack"):  # the bulk; kept in --json
            print(event, file=out)
    consumed = len(result.consumed)
    acked = len(result.produced)
    print(f"\n{acked} records acknowledged, {consumed} delivered to consumers", file=out)
    if result.log_dirs:
        print("log dirs: " + ", ".join(str(p) for p in result.log_dirs.values()), file=out)
    if not result.violations:
        print("no invariant violated", file=out)
        return
    print(f"{len(result.violations)} invariant violation(s):", file=out)
    for v in result.violations:
        print(v, file=out)
