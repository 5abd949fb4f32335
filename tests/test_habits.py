"""The project's habits, checked: the suite fails on warnings and on unexpected passes, and ruff (run
by `make lint` and the CI lint job) sorts imports, caps complexity and rejects a `# noqa` that
suppresses nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"


def _run_pytest_with_project_config(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(PYPROJECT), "--rootdir", str(tmp_path), "-q",
         "-p", "no:cacheprovider", str(tmp_path / "test_probe.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )


def test_a_warning_fails_the_test_and_an_unexpected_pass_fails_too(tmp_path: Path) -> None:
    out = _run_pytest_with_project_config(
        tmp_path,
        "import warnings\nimport pytest\n\n"
        "def test_warns():\n    warnings.warn('ours', UserWarning)\n\n"
        "@pytest.mark.xfail(reason='expected to fail')\ndef test_passes_anyway():\n    pass\n\n"
        "def test_clean():\n    pass\n",
    )
    assert "2 failed, 1 passed" in out.stdout, out.stdout + out.stderr
    assert "UserWarning: ours" in out.stdout and "XPASS(strict)" in out.stdout


def test_only_named_third_party_warnings_are_let_through() -> None:
    filters = tomllib.loads(PYPROJECT.read_text())["tool"]["pytest"]["ini_options"]["filterwarnings"]
    assert filters[0] == "error"
    for rule in filters[1:]:
        action, message, *_ = rule.split(":")
        assert action == "ignore" and message, f"an exemption must name the warning it lets through: {rule}"


def test_ruff_config_selects_import_sorting_complexity_and_unused_noqa() -> None:
    lint = tomllib.loads(PYPROJECT.read_text())["tool"]["ruff"]["lint"]
    assert {"I", "C90", "RUF", "F", "E", "B"} <= set(lint["select"])
    assert "RUF100" not in lint.get("ignore", []) and lint["mccabe"]["max-complexity"] <= 12


def test_ruff_flags_what_the_config_promises(tmp_path: Path) -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is in the dev extra: pip install -e '.[dev]')")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys\nimport os\n\n\nprint(os.sep, sys.argv)  # noqa: E501\n\n\n"
        "def branches(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(13)) + "    return -1\n"
    )
    out = subprocess.run(
        [ruff, "check", "--config", str(PYPROJECT), "--output-format", "concise", "--no-cache", str(probe)],
        capture_output=True, text=True, timeout=60,
    )
    found = {line.split(" ")[1] for line in out.stdout.splitlines() if line.startswith(str(probe))}
    assert {"I001", "RUF100", "C901"} <= found, out.stdout + out.stderr
