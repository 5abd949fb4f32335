import subprocess
import sys


def test_import_pulls_in_no_optional_dependency() -> None:
    code = "import sys, epochguard; print(sorted(m for m in ('pyarrow', 'pyspark', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
