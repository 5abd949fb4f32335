"""The command line's conventions: required inputs are positionals, options have defaults and say what
goes there, every command describes itself to users, `--version` works, exit codes are as documented."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import epochguard
from epochguard.__main__ import build_parser, main


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"epochguard {epochguard.__version__}"


def test_version_from_the_installed_script() -> None:
    out = subprocess.run([sys.executable, "-m", "epochguard", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["epochguard", epochguard.__version__]


def test_top_level_help_is_written_for_users(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    import epochguard.__main__ as cli_module

    assert cli_module.__doc__ is not None and cli_module.__doc__.splitlines()[0] not in out  # no developers' note
    assert "leader election" in out and "exit codes" in out
    for name in ("simulate", "audit", "demo"):
        assert name in out


def test_every_command_has_a_description_and_says_what_its_options_take() -> None:
    for name, sub in _subcommands(build_parser()).items():
        assert sub.description and len(sub.description) > 40, f"`epochguard {name} --help` has no description"
        for action in sub._actions:
            takes_value = action.option_strings and action.nargs != 0 and action.help != argparse.SUPPRESS
            if takes_value and action.choices is None:
                assert action.metavar, f"`epochguard {name} {action.option_strings[0]}` needs a metavar"
            if action.help != argparse.SUPPRESS:
                assert action.help, f"`epochguard {name}`: {action.dest} has no help"


def test_simulate_takes_the_scenario_as_a_positional(capsys) -> None:
    assert main(["simulate", "zombie-replica", "--protocol", "pre-kip-320"]) == 1
    assert "VIOLATION isr-agreement" in capsys.readouterr().out


def test_simulate_still_accepts_the_deprecated_scenario_option(capsys) -> None:
    assert main(["simulate", "--scenario", "zombie-replica", "--seed", "2"]) == 0
    captured = capsys.readouterr()
    assert "no invariant violated" in captured.out
    assert "--scenario is deprecated" in captured.err and "epochguard simulate zombie-replica" in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate"], "the scenario is missing"),
        (["simulate", "zombie-replica", "--scenario", "leader-bounce"], "two scenarios"),
    ],
)
def test_simulate_without_one_clear_scenario_exits_2(argv: list[str], message: str, capsys) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_simulate_rejects_an_unknown_scenario_with_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "no-such-scenario"])
    assert exit_.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_audit_out_defaults_to_audit_out_like_the_library() -> None:
    pytest.importorskip("pyspark", reason="the audit command needs the Spark extra (pyspark)")
    import inspect

    from epochguard.spark.auditing import audit

    args = build_parser().parse_args(["audit", "/backup/broker-1", "/backup/broker-2"])
    assert args.log_dirs == ["/backup/broker-1", "/backup/broker-2"]
    assert args.out == "audit-out" == inspect.signature(audit).parameters["out"].default
    assert (args.master, args.consumed, args.json) == ("local[2]", None, False)


def test_serve_judge_simulate_and_compat_start_without_importing_spark(tmp_path) -> None:
    """`epochguard serve` starts once per wire test: pyspark and pandas cost it seconds on a loaded machine."""
    probe = ("import sys\nfrom epochguard.__main__ import build_parser, main\n"
             "for command in ('simulate', 'serve', 'judge', 'compat'):\n"
             "    build_parser(command)\n"
             f"assert main(['judge', {str(tmp_path / 'none.jsonl')!r}]) == 2\n"
             "print(sorted(m for m in ('pyspark', 'pandas', 'epochguard.spark') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]"]
    assert {"audit", "demo"} <= set(_subcommands(build_parser()))  # still there for every other command
    assert {"audit", "demo"} <= set(_subcommands(build_parser("audit")))
