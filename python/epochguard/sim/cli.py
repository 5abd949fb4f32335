"""`epochguard simulate`: run a scenario, print its timeline (or JSON); exit 1 when an invariant broke."""

from __future__ import annotations

import argparse
import json
import sys

from epochguard.sim.scenarios import PROTOCOLS, SCENARIOS, SimulationResult, run_scenario


def configure(p: argparse.ArgumentParser) -> None:
    """Arguments of `epochguard simulate` (the parser is made by `epochguard.__main__`)."""
    p.description = (
        "Run a seeded fault scenario on a simulated three-broker cluster and check the leader-epoch "
        "invariants after every step. Exit code: 0 no invariant violated, 1 a violation was found, "
        "2 could not run. Scenarios: " + ", ".join(SCENARIOS) + "."
    )
    p.add_argument("scenario", nargs="?", choices=list(SCENARIOS), metavar="SCENARIO",
                   help="the fault scenario: " + ", ".join(SCENARIOS))
    # Deprecated spelling (the scenario used to be a required option); hidden, accepted with a warning.
    p.add_argument("--scenario", dest="scenario_option", choices=list(SCENARIOS), help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of every delay, drop and random fault (default: 0)")
    p.add_argument("--protocol", choices=list(PROTOCOLS), default="kip-320",
                   help="kip-320 (epochs, the default) or pre-kip-320 (offsets only)")
    p.add_argument("--steps", type=int, default=None, metavar="N", help="number of steps (default: the scenario's)")
    p.add_argument("--partitions", type=int, default=None, metavar="N",
                   help="partitions of the topic (default: the scenario's)")
    p.add_argument("--log-dir", default=None, metavar="DIR",
                   help="write every broker's Kafka log dir under DIR (broker-<id>/; must be new or empty)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run)
    # SCENARIO is optional to argparse only for the deprecated spelling; to users it is required.
    p.usage = p.format_usage().removeprefix("usage: ").rstrip().replace("[SCENARIO]", "SCENARIO")


def _scenario(args: argparse.Namespace) -> str:
    """The positional SCENARIO, or the deprecated `--scenario` (with a warning on stderr)."""
    if args.scenario_option is not None:
        print("epochguard simulate: --scenario is deprecated; write `epochguard simulate "
              f"{args.scenario_option}`", file=sys.stderr)
        if args.scenario not in (None, args.scenario_option):
            raise ValueError(f"two scenarios given: {args.scenario} and --scenario {args.scenario_option}")
        return str(args.scenario_option)
    if args.scenario is None:
        raise ValueError("the scenario is missing: epochguard simulate SCENARIO (one of "
                         + ", ".join(SCENARIOS) + ")")
    return str(args.scenario)


def run(args: argparse.Namespace) -> int:
    try:
        result = run_scenario(_scenario(args), seed=args.seed, protocol=args.protocol, steps=args.steps,
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


def print_timeline(result: SimulationResult, out=None) -> None:
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
