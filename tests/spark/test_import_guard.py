"""Without the Spark extra, `epochguard.spark` and its CLI commands say how to get it."""

from __future__ import annotations

import subprocess
import sys

HIDE_PYSPARK = "import sys; sys.modules['pyspark'] = None; "  # makes `import pyspark` fail


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", HIDE_PYSPARK + code], capture_output=True, text=True, timeout=60)


def test_import_guard_names_the_extra() -> None:
    out = _run("import epochguard.spark")
    assert out.returncode != 0
    assert "ImportError" in out.stderr and "pip install 'epochguard[spark]'" in out.stderr


def test_cli_commands_explain_and_exit_2() -> None:
    out = _run("from epochguard.__main__ import main; sys.exit(main(['audit', 'somewhere', '--out', 'x']))")
    assert out.returncode == 2 and "epochguard[spark]" in out.stderr


def test_stream_source_imports_no_audit() -> None:
    """Every Python process Spark starts for `format("epochguard-kafka")` imports `epochguard.spark.stream`:
    it must not pay for the audit (pandas, rich) that `epochguard.spark` offers; the names stay reachable."""
    out = subprocess.run([sys.executable, "-c", (
        "import sys, epochguard.spark.stream; "
        "print(sorted(m for m in ('pandas', 'rich', 'epochguard.spark.auditing', 'epochguard.spark.udfs') if m in sys.modules)); "
        "import epochguard.spark.auditing; from epochguard.spark import audit, local_session, register; "
        "print(audit.__module__, local_session.__module__, register.__module__, callable(epochguard.spark.audit))")],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == [
        "[]", "epochguard.spark.auditing epochguard.spark.session epochguard.spark.datasource True"], out.stdout
