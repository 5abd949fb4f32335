import subprocess
import sys


def test_import_pulls_in_no_optional_dependency() -> None:
    code = "import sys, epochguard; print(sorted(m for m in ('pyarrow', 'pyspark', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_curated_api_resolves() -> None:
    import epochguard

    missing = [name for name in epochguard.__all__ if not hasattr(epochguard, name)]
    assert missing == []
    assert isinstance(epochguard.__version__, str) and epochguard.__version__.count(".") == 2


def test_every_core_symbol_is_reachable_from_the_package() -> None:
    """Users never import `_core`: each of its public names is re-exported by some public module."""
    import importlib

    from epochguard import _core

    public_modules = [importlib.import_module(m) for m in ("epochguard", "epochguard.errors", "epochguard.records", "epochguard.logdir_format")]
    unreachable = [n for n in _core.__all__ if not any(hasattr(m, n) for m in public_modules)]
    assert unreachable == []
