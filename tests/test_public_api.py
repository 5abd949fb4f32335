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

    public_modules = [importlib.import_module(m) for m in ("epochguard", "epochguard.errors", "epochguard.records", "epochguard.storage.logdir_format",
                                                             "epochguard.wire.codec")]
    unreachable = [n for n in _core.__all__ if not any(hasattr(m, n) for m in public_modules)]
    assert unreachable == []


def test_decode_to_arrow_is_top_level_under_one_name() -> None:
    import epochguard
    import epochguard.records

    assert epochguard.decode_to_arrow is epochguard.records.decode_to_arrow and "decode_to_arrow" in epochguard.__all__
    # one name per function: no public object is exported twice under different names
    objects = [getattr(epochguard, n) for n in epochguard.__all__ if callable(getattr(epochguard, n))]
    assert len({id(o) for o in objects}) == len(objects)


def test_every_exception_users_can_meet_is_an_epochguard_error() -> None:
    import epochguard.errors
    import epochguard.storage.log

    assert issubclass(epochguard.storage.log.UnexpectedAppendOffsetError, epochguard.EpochGuardError)
    assert issubclass(epochguard.storage.log.UnexpectedAppendOffsetError, ValueError)  # what it was, still caught
    for module in (epochguard.errors, epochguard.storage.log):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                assert issubclass(obj, epochguard.EpochGuardError), f"{module.__name__}.{name}"
