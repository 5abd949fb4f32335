"""The benchmark gate: benches/ratios.py turns one pytest-benchmark run into the performance table's headline
ratios (baseline time / epochguard time, same run), and the bench workflow compares them on every
push and pull request, failing past its threshold."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ratios_module():
    spec = importlib.util.spec_from_file_location("bench_ratios", ROOT / "benches" / "ratios.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module while the class is built
    spec.loader.exec_module(module)
    return module


def _bench(name: str, minimum: float, median: float = 99.0) -> dict:
    return {"fullname": f"benches/python/test_bench_decode.py::{name}", "stats": {"min": minimum, "median": median}}


def test_ratios_divide_the_baselines_minimum_by_ours(ratios_module, tmp_path: Path, capsys) -> None:
    report = {"benchmarks": [
        {**_bench("test_compressed_decode[lz4]", 0.016), "extra_info": {"baseline_seconds": [0.0112, 0.0106]}},
        _bench("test_epochguard_1k", 0.004),  # no memcpy turns recorded: that ratio left out
        _bench("test_kafka_python_1k", 0.0501),
        _bench("test_compressed_decode[zstd]", 0.0274),  # its baseline is missing: left out
    ]}
    (tmp_path / "bench.json").write_text(json.dumps(report))
    assert ratios_module.main([str(tmp_path / "bench.json"), "--out", str(tmp_path / "ratios.json")]) == 0
    got = {r["name"]: r["value"] for r in json.loads((tmp_path / "ratios.json").read_text())}
    assert got == {
        "decode 1 KiB values: epochguard vs kafka-python": 12.525,
        "lz4 batches to Arrow vs raw lz4.frame decompression": 0.662,
    }
    assert "0.66x  lz4" in capsys.readouterr().err


def test_no_pair_found_is_exit_2(ratios_module, tmp_path: Path) -> None:
    (tmp_path / "bench.json").write_text(json.dumps({"benchmarks": [_bench("test_epochguard_1k", 1.0)]}))
    assert ratios_module.main([str(tmp_path / "bench.json")]) == 2


def test_a_baseline_that_took_turns_is_read_from_ours_extra_info(ratios_module, tmp_path: Path) -> None:
    ours = {"fullname": "benches/python/test_bench_client.py::test_client_send[kafka]",
            "stats": {"min": 0.5, "median": 0.6}, "extra_info": {"baseline_seconds": [1.5, 1.0, 2.5]}}
    alone = {"fullname": "benches/python/test_bench_client.py::test_client_send[serve]",
             "stats": {"min": 0.5, "median": 0.6}, "extra_info": {}}  # no turns recorded: left out
    got = {r["name"]: r["value"] for r in ratios_module.ratios({"benchmarks": [ours, alone]})}
    assert got == {"client send vs kafka-python send, kafka": 2.0}  # the baseline's min over ours'


def test_every_ratio_names_benchmarks_that_exist(ratios_module) -> None:
    sources = "\n".join(p.read_text() for p in (ROOT / "benches" / "python").glob("test_*.py"))
    for ratio in ratios_module.RATIOS:
        for name in (ratio.ours, ratio.baseline):
            if name == ratios_module.TURNS:
                assert '"baseline_seconds"' in sources
                continue
            assert f"def {name.split('[')[0]}(" in sources, name


def test_the_bench_workflow_gates_pull_requests() -> None:
    workflow = (ROOT / ".github" / "workflows" / "bench.yml").read_text()
    on = workflow[workflow.index("\non:"):workflow.index("\npermissions:")]
    assert "pull_request:" in on and "push:" in on
    assert "benchmark-action/github-action-benchmark@v1" in workflow
    assert "benches/ratios.py" in workflow and "tool: customBiggerIsBetter" in workflow
    gate = workflow[workflow.index("tool: customBiggerIsBetter"):workflow.index("name: criterion")]
    assert "fail-on-alert: true" in gate and 'alert-threshold: "120%"' in gate
