"""Mutation testing of the protocol modules (mutmut 3) and the Rust core (cargo-mutants): `make mutants`.

    python tools/mutants.py python [--changed] [--base REF] [--only GLOB ...] [--max-children N]
    python tools/mutants.py rust   [--changed] [--base REF] [--jobs N | --in-place] [--timeout S] [--file F ...]
                                   [epoch|decoder ...]
    python tools/mutants.py report [--summary FILE]

Python: mutmut needs the package importable as `epochguard` from its `mutants/` copy, and only knows
the `src/` layout, so the package is mirrored into `target/mutants/py/src/epochguard` (the compiled
`_core` with it) and mutmut runs there, with the protocol and simulator tests (no Spark, nothing
marked `slow` or `no_mutants`) as the oracle; mutmut runs only the tests that reach the mutated
function. The mirror is kept between runs: mutmut forgets only the verdicts of functions whose code
changed, so a second run is incremental by itself. Every target file stays mutated in every run;
`--only GLOB` and `--changed` (the target files changed since the merge base with `--base`, default
main) select which untested mutants run, `--rerun-survivors` adds the last survivors (after new tests).

Rust: cargo-mutants over `RUST_FILES` in groups, each with its own test binaries as the oracle (only
those are built and run per mutant); `--changed` passes `--in-diff` with the diff since the merge base.
`--file F` restricts a group to some of its files; such a run writes its own directory
(target/mutants/rust/GROUP.STEMS) and `report` takes each file's verdicts from the newest run that
covered it. The test timeout is a few times the oracle's baseline (epoch ~2 s, decoder ~8 s on this
2-core machine): a mutant that loops forever costs the timeout, and 120 s once cost most of a run.

Scores: a mutant is killed (a test failed, it timed out, or it broke the import), survived, or
equivalent: listed in tools/mutants-equivalent.txt (`name  # why it cannot change behaviour`), left
out of the denominator. `report` prints the per-file table, writes the survivors (each with its diff)
to target/mutants/survivors.md and, with --summary, the table as Markdown (a GitHub job summary).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "target" / "mutants"
PY_WORK = WORK / "py"
RUST_OUT = WORK / "rust"
EQUIVALENT = ROOT / "tools" / "mutants-equivalent.txt"

# The protocol state machines, the coordinator and the simulator's invariants (package-relative globs;
# `client/consumer/*` covers the consumer package and its request managers).
PY_TARGETS = [
    "broker/partition.py",
    "broker/fetcher.py",
    "broker/replica_manager.py",
    "client/consumer/*.py",
    "client/consumer/*/*.py",
    "client/metadata.py",
    "storage/log.py",
    "broker/group/coordinator.py",
    "broker/group/classic_group.py",
    "sim/invariants.py",
]
PY_TESTS = ["tests/protocol", "tests/sim"]
# The oracle: the protocol and simulator tests minus the long randomized and cross-process ones (marked
# `no_mutants`; `make test` still runs them), which cost seconds per mutant and kill nothing the fast
# tests do not (measured in docs/testing.md, "Mutation testing").
ORACLE_MARKERS = "not slow and not spark and not no_mutants"
# Each group of Rust files with the cargo tests that are its oracle (building fewer test binaries per
# mutant is most of the speed): the epoch core with tests/rust/epoch.rs, the record-batch decoder with
# the unit tests, tests/rust/decoder.rs (field by field, 0.1 s) and tests/rust/records.rs (round trips
# and the corpus fuzz, 8-15 s). cargo runs them in that order and stops at the first failing binary,
# so a mutant the fast tests catch never pays for the slow ones.
RUST_GROUPS = {
    "epoch": (["rust/epoch_cache.rs", "rust/divergence.rs", "rust/checkpoint.rs"], ["--test", "epoch"]),
    "decoder": (
        ["rust/records/batch.rs", "rust/records/record.rs", "rust/records/varint.rs", "rust/records/legacy.rs"],
        ["--lib", "--test", "decoder", "--test", "records"],
    ),
}
RUST_FILES = [f for files, _ in RUST_GROUPS.values() for f in files]

# mutmut's exit codes: which count as killed (mutmut.stats.status_by_exit_code)
_KILLED = {1, 3, 24, -24, 152, 255, 36, 37, -9, -11}
_SURVIVED = {0, 5, 33}


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    shown = cmd if len(cmd) <= 12 else [*cmd[:10], f"... ({len(cmd) - 10} more)"]
    print("+", " ".join(shown), flush=True)
    return subprocess.run(cmd, **kw)


def changed_files(base: str) -> set[str]:
    """Files changed since the merge base with `base`, committed or not (repository-relative)."""
    merge_base = subprocess.run(["git", "merge-base", "HEAD", base], cwd=ROOT, capture_output=True, text=True)
    ref = merge_base.stdout.strip() or base
    out = subprocess.run(["git", "diff", "--name-only", ref], cwd=ROOT, capture_output=True, text=True, check=True)
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return {line for line in (out.stdout + untracked.stdout).splitlines() if line}


def _is_target(rel: str) -> bool:
    return any(fnmatch.fnmatch(rel, pattern) for pattern in PY_TARGETS)


def changed_python_targets(base: str) -> list[str]:
    """The target modules changed since `base`, as package-relative paths (what `--only` takes)."""
    prefix = "python/epochguard/"
    changed = {p.removeprefix(prefix) for p in changed_files(base) if p.startswith(prefix)}
    return sorted(p for p in changed if _is_target(p))


# --- Python ------------------------------------------------------------------------------------------
def _sync_tree(src: Path, dst: Path, *, skip: tuple[str, ...] = ("__pycache__",)) -> None:
    """Mirror `src` into `dst`: copy what differs (new mtime, so mutmut sees the change), drop extras."""
    dst.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for path in src.rglob("*"):
        if any(part in skip for part in path.parts):
            continue
        rel = path.relative_to(src)
        wanted.add(rel)
        target = dst / rel
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif not target.exists() or target.read_bytes() != path.read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    for path in sorted(dst.rglob("*"), reverse=True):
        rel = path.relative_to(dst)
        if rel not in wanted and not any(part in skip for part in rel.parts):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def _mutmut_config() -> str:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pytest_ini = pyproject["tool"]["pytest"]["ini_options"]
    lines = ["[tool.pytest.ini_options]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in pytest_ini.items() if key != "testpaths"]
    lines += [
        "",
        "[tool.mutmut]",
        'source_paths = ["src/epochguard"]',
        # Every target stays mutated in every run (a file mutmut copies unmutated loses its trampolines,
        # and with them its test map); `--only` narrows which mutants run, not which files are mutated.
        f"only_mutate = {json.dumps(['src/epochguard/' + p for p in PY_TARGETS])}",
        f"pytest_add_cli_args = {json.dumps(['-p', 'no:cacheprovider', '-m', ORACLE_MARKERS])}",
        f"pytest_add_cli_args_test_selection = {json.dumps(PY_TESTS)}",
        "use_git_change_detection = false",
        "timeout_multiplier = 10.0",
    ]
    return "\n".join(lines) + "\n"


# mutmut's own first step (copy the tree, mutate the files that changed, forget the verdicts of the
# functions that changed), run alone so that the selection can be read from the fresh .meta files.
_GENERATE = """
import mutmut.__main__ as m
from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths
copy_src_dir(); copy_also_copy_files(); setup_source_paths(); m.create_mutants(2)
"""


def _mirror_support_files() -> None:
    """mutmut copies a non-Python file (the compiled `_core`, stubs) into mutants/ only once, and never
    deletes a test file: keep both in step with the source, or the tests run against a stale `_core`."""
    src, copy = PY_WORK / "src" / "epochguard", PY_WORK / "mutants" / "src" / "epochguard"
    for path in src.rglob("*"):
        target = copy / path.relative_to(src)
        if path.is_dir() or path.suffix == ".py":
            continue
        if not target.exists() or target.read_bytes() != path.read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    for folder in PY_TESTS:
        _sync_tree(PY_WORK / folder, PY_WORK / "mutants" / folder)


def _selected(only: list[str], equivalent: dict[str, str], *, survivors: bool) -> list[str]:
    """The mutants of the files matching `only` that have no verdict yet (and, with `survivors`, the
    ones that survived last time): named one by one, since mutmut re-tests every mutant it is given."""
    names = []
    root = PY_WORK / "mutants" / "src" / "epochguard"
    for meta in sorted(root.rglob("*.py.meta")):
        rel = meta.relative_to(root).as_posix().removesuffix(".meta")
        if not any(fnmatch.fnmatch(rel, pattern) for pattern in only):
            continue
        for name, code in _read_json(meta)["exit_code_by_key"].items():
            if name.removeprefix("src.") in equivalent:
                continue
            if code is None or (survivors and code not in _KILLED):
                names.append(name)
    return names


def run_python(args: argparse.Namespace) -> int:
    package = ROOT / "python" / "epochguard"
    if not list(package.glob("_core*")):
        sys.exit("the compiled extension is missing: run `make setup` first")
    if importlib.util.find_spec("mutmut") is None:  # `make setup` does not install it
        sys.exit("mutmut is missing: run `make mutants-tools` (or pip install 'mutmut>=3.8,<4')")
    only = list(args.only or PY_TARGETS)
    if args.changed:
        only = changed_python_targets(args.base)
        if not only:
            print("mutants: no protocol module changed since", args.base)
            return 0
    _sync_tree(package, PY_WORK / "src" / "epochguard")
    for folder in PY_TESTS:
        _sync_tree(ROOT / folder, PY_WORK / folder)
    (PY_WORK / "pyproject.toml").write_text(_mutmut_config())
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    # A target left unmutated by an older version of this script: mutate it again (its verdicts stay).
    copies = PY_WORK / "mutants" / "src" / "epochguard"
    for pattern in PY_TARGETS:
        for copy in copies.glob(pattern):
            if "_mutmut_mutated" not in copy.read_text() and "def " in copy.read_text():
                copy.unlink()
    _run([sys.executable, "-c", _GENERATE], cwd=PY_WORK, env=env, check=True, stdout=subprocess.DEVNULL)
    _mirror_support_files()
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children)]
    if args.only or args.changed or args.rerun_survivors:
        names = _selected(only, load_equivalent(), survivors=args.rerun_survivors)
        if not names:
            print("mutants: nothing left to test in", " ".join(only))
            return 0
        print(f"mutants: {len(names)} mutants to test in", " ".join(only), flush=True)
        cmd += names
    else:
        names = _selected(PY_TARGETS, load_equivalent(), survivors=False)
    _refresh_stats_for_new_functions(names)
    result = _run(cmd, cwd=PY_WORK, env=env)
    _remember_untested_functions(names)
    return result.returncode


# mutmut maps each function to the tests that reach it once, when it collects its stats, and later only
# for tests that are new: a function added since (a helper split out of a tested one) has no tests in
# the map, and every mutant of it would end "no tests" (a survivor). So when a mutant about to run
# belongs to a function missing from the map, the stats are collected afresh (a minute or two); the
# functions still missing after that really are untested, and are remembered so as not to do it again.
_STATS = PY_WORK / "mutants" / "mutmut-stats.json"
_UNTESTED = PY_WORK / "untested-functions.json"


def _function_of(mutant: str) -> str:
    return mutant.rpartition("__mutmut_")[0]


def _unmapped(names: list[str]) -> set[str]:
    mapped = _read_json(_STATS).get("tests_by_mangled_function_name", {})
    return {_function_of(n) for n in names} - mapped.keys()


def _refresh_stats_for_new_functions(names: list[str]) -> None:
    if not _STATS.exists():
        return
    known_untested = set(_read_json(_UNTESTED)) if _UNTESTED.exists() else set()
    new = _unmapped(names) - known_untested
    if new:
        print(f"mutants: {len(new)} functions without a test map (new since the stats), e.g. {min(new)}:"
              " collecting mutmut's stats afresh", flush=True)
        _STATS.unlink()


def _remember_untested_functions(names: list[str]) -> None:
    if _STATS.exists():
        _UNTESTED.write_text(json.dumps(sorted(_unmapped(names))))


@dataclass
class FileScore:
    killed: int = 0
    survived: list[str] = field(default_factory=list)
    equivalent: int = 0
    not_run: int = 0

    @property
    def counted(self) -> int:
        return self.killed + len(self.survived)

    def percent(self) -> str:
        return "n/a" if not self.counted else f"{100 * self.killed / self.counted:.1f}%"


def load_equivalent() -> dict[str, str]:
    """`name  # reason` per line; every entry must give a reason."""
    out: dict[str, str] = {}
    if not EQUIVALENT.exists():
        return out
    for n, line in enumerate(EQUIVALENT.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition("#")
        if not reason.strip():
            sys.exit(f"{EQUIVALENT}:{n}: an equivalent mutant needs a one-line reason")
        out[name.strip()] = reason.strip()
    return out


def python_scores(equivalent: dict[str, str]) -> dict[str, FileScore]:
    scores: dict[str, FileScore] = {}
    root = PY_WORK / "mutants" / "src" / "epochguard"
    for meta in sorted(root.rglob("*.py.meta")):
        rel = meta.relative_to(root).as_posix().removesuffix(".meta")
        if not _is_target(rel):
            continue
        score = scores.setdefault(f"python/epochguard/{rel}", FileScore())
        for name, code in _read_json(meta)["exit_code_by_key"].items():
            name = name.removeprefix("src.")
            if name in equivalent:
                score.equivalent += 1
            elif code is None:
                score.not_run += 1
            elif code in _SURVIVED:
                score.survived.append(name)
            elif code in _KILLED:
                score.killed += 1
            else:
                score.survived.append(name)  # suspicious: not a clean kill
    return scores


def _read_json(path: Path) -> Any:
    """mutmut rewrites its .meta files as it goes: retry a read that catches one half-written."""
    for attempt in range(20):
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            if attempt == 19:
                raise
            time.sleep(0.1)
    return {}


def _python_diff(name: str) -> str:
    out = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=PY_WORK, capture_output=True, text=True)
    return out.stdout.strip()


# --- Rust --------------------------------------------------------------------------------------------
def run_rust(args: argparse.Namespace) -> int:
    if subprocess.run(["cargo", "mutants", "--version"], capture_output=True).returncode != 0:
        sys.exit("cargo-mutants is missing: cargo install cargo-mutants --locked")
    status = 0
    for group in args.groups or list(RUST_GROUPS):
        if group not in RUST_GROUPS:
            sys.exit(f"unknown group {group!r}: one of {sorted(RUST_GROUPS)}")
        files, test_args = RUST_GROUPS[group]
        if args.file:
            files = [f for f in files if f in args.file]
            if not files:
                continue
        # A `--file` run keeps its own directory, so it does not replace the group's other verdicts.
        subset = "" if files == RUST_GROUPS[group][0] else "." + "+".join(Path(f).stem for f in files)
        out = RUST_OUT / f"{group}{subset}"
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = ["cargo", "mutants", "--no-shuffle", "--output", str(out)]
        # Cargo.toml's `mutation` profile: the test profile without debug info, ~25% less build and
        # link time per mutant (measured: 3.1 s instead of 4.4 s for the epoch oracle, 4.0 s instead of
        # 5.1 s for the decoder's, medians of 4 on the loaded 2-core machine).
        cmd += ["--profile", "mutation"]
        cmd += ["--timeout", str(args.timeout), *(a for f in files for a in ("--file", f))]
        # `--cargo-arg`, not `--cargo-test-arg`: the build phase then compiles only the oracle's test
        # binaries, not every test target of the crate (measured: 4 s instead of 16 s per epoch mutant).
        cmd += [f"--cargo-arg={a}" for a in test_args]
        if args.in_place:
            cmd.append("--in-place")  # reuses ./target (no fresh debug build of the dependencies); one job
        else:
            cmd += ["--jobs", str(args.jobs)]
        if args.changed:
            merge_base = subprocess.run(
                ["git", "merge-base", "HEAD", args.base], cwd=ROOT, capture_output=True, text=True
            )
            diff = subprocess.run(["git", "diff", merge_base.stdout.strip() or args.base, "--", *files],
                                  cwd=ROOT, capture_output=True, text=True, check=True).stdout
            if not diff.strip():
                print(f"mutants: no {group} file changed since {args.base}")
                continue
            out.mkdir(parents=True, exist_ok=True)
            (out / "changes.diff").write_text(diff)
            cmd += ["--in-diff", str(out / "changes.diff")]
        result = _run(cmd, cwd=ROOT)
        if result.returncode not in (0, 2, 3):  # 2: mutants missed, 3: timeouts (both reported, not failures)
            status = result.returncode
    return status


def rust_scores(equivalent: dict[str, str]) -> dict[str, FileScore]:
    # A file's verdicts come from the newest run that covered it (a group run or a `--file` run).
    latest: dict[str, list[dict]] = {}
    for path in sorted(RUST_OUT.glob("*/mutants.out/outcomes.json"), key=lambda p: p.stat().st_mtime):
        run: dict[str, list[dict]] = {}
        for outcome in json.loads(path.read_text()).get("outcomes", []):
            scenario = outcome.get("scenario")
            if isinstance(scenario, dict) and "Mutant" in scenario:
                run.setdefault(scenario["Mutant"].get("file", "?"), []).append(outcome)
        latest.update(run)
    scores: dict[str, FileScore] = {}
    for file, outcomes in latest.items():
        for outcome in outcomes:
            _score_rust(scores.setdefault(file, FileScore()), outcome, equivalent)
    return scores


def _score_rust(score: FileScore, outcome: dict, equivalent: dict[str, str]) -> None:
    name = _rust_name(outcome["scenario"]["Mutant"])
    summary = outcome.get("summary")
    if name in equivalent:
        score.equivalent += 1
    elif summary in ("CaughtMutant", "Timeout"):
        score.killed += 1
    elif summary == "MissedMutant":
        score.survived.append(name)
    elif summary == "Unviable":
        pass  # does not build: neither killed nor survived
    else:
        score.not_run += 1


def _rust_name(mutant: dict) -> str:
    """cargo-mutants' own name: `file:line:column: replace X with Y in function`."""
    return mutant.get("name") or f"{mutant.get('file')}:{mutant.get('span', {}).get('start', {}).get('line')}"


# --- report ------------------------------------------------------------------------------------------
def report(args: argparse.Namespace) -> int:
    equivalent = load_equivalent()
    scores = {**python_scores(equivalent), **rust_scores(equivalent)}
    rust_diffs = {
        m.get("name"): m.get("diff", "") for p in RUST_OUT.glob("*/mutants.out/mutants.json") for m in _read_json(p)
    }
    rows = ["| file | killed | survived | equivalent | not run | score |", "|---|---:|---:|---:|---:|---:|"]
    for file, s in sorted(scores.items()):
        rows.append(f"| {file} | {s.killed} | {len(s.survived)} | {s.equivalent} | {s.not_run} | {s.percent()} |")
    table = "\n".join(rows)
    print(table)
    WORK.mkdir(parents=True, exist_ok=True)
    lines = ["# Surviving mutants", "", table, ""]
    for file, s in sorted(scores.items()):
        for name in s.survived:
            python = file.startswith("python/") and not args.names_only
            diff = _python_diff(name) if python else rust_diffs.get(name, "")
            lines += [f"## {name}", "", "```diff", diff or name, "```", ""]
    (WORK / "survivors.md").write_text("\n".join(lines))
    print(f"survivors: {WORK / 'survivors.md'}")
    if args.summary:
        with open(args.summary, "a") as f:
            f.write("## Mutation testing\n\n" + table + "\n\nSurvivors (with diffs): the `mutants` artifact.\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    py = sub.add_parser("python")
    py.add_argument("--changed", action="store_true")
    py.add_argument("--base", default="main")
    py.add_argument("--only", nargs="*", help="package-relative globs (default: every target)")
    py.add_argument("--max-children", type=int, default=2)
    py.add_argument("--rerun-survivors", action="store_true",
                    help="with the untested mutants, test again what survived last time")
    rs = sub.add_parser("rust")
    rs.add_argument("--changed", action="store_true")
    rs.add_argument("--base", default="main")
    rs.add_argument("--jobs", type=int, default=1)
    rs.add_argument("--timeout", type=int, default=30, help="seconds per mutant's tests (baseline: 2-8 s)")
    rs.add_argument("--in-place", action="store_true",
                    help="mutate the working tree (faster; keep hands off meanwhile)")
    rs.add_argument("--file", action="append",
                    help="only these files of the groups (repeatable; e.g. rust/epoch_cache.rs)")
    rs.add_argument("groups", nargs="*", help=f"of {sorted(RUST_GROUPS)} (default: all)")
    rp = sub.add_parser("report")
    rp.add_argument("--summary", help="append the table as Markdown (e.g. $GITHUB_STEP_SUMMARY)")
    rp.add_argument("--names-only", action="store_true", help="survivors without their diffs (fast)")
    args = parser.parse_args()
    return {"python": run_python, "rust": run_rust, "report": report}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
