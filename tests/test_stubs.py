"""The extension's stubs (`_core.pyi`) must match the compiled module exactly: stubtest gates drift."""

import subprocess
import sys

import pytest


def test_core_stubs_match_runtime() -> None:
    pytest.importorskip("mypy")
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "epochguard._core"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
