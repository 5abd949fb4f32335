"""leader-epoch-checkpoint read/write through the bindings: Kafka's bytes, strict parsing, atomic write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from epochguard._core import LeaderEpochCache
from epochguard.errors import CheckpointError, EpochGuardError

REAL_DIRS = sorted(Path("/work/shared/kafka-segments/ldi-poc").glob("*/leader-epoch-checkpoint"))


@pytest.mark.skipif(not REAL_DIRS, reason="broker-written checkpoints not available")
@pytest.mark.parametrize("path", REAL_DIRS, ids=lambda p: p.parent.name)
def test_real_broker_files_round_trip_byte_for_byte(path: Path, tmp_path: Path) -> None:
    cache = LeaderEpochCache.read_checkpoint(path)
    assert len(cache) >= 1 and cache.earliest_entry[1] == 0
    out = tmp_path / "leader-epoch-checkpoint"
    cache.write_checkpoint(out)
    assert out.read_bytes() == path.read_bytes()


def test_write_format_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache([(0, 0), (2, 15), (7, 1234567890123)])
    cache.write_checkpoint(str(path))  # str and PathLike both accepted
    assert path.read_bytes() == b"0\n3\n0 0\n2 15\n7 1234567890123\n"
    assert LeaderEpochCache.read_checkpoint(path) == cache
    LeaderEpochCache().write_checkpoint(path)
    assert path.read_bytes() == b"0\n0\n"


def test_write_replaces_target_whole_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n1\n9 9\n" + "x" * 10_000)
    before = path.stat().st_ino
    LeaderEpochCache([(1, 4)]).write_checkpoint(path)
    assert path.read_text() == "0\n1\n1 4\n"
    assert path.stat().st_ino != before  # renamed over, not rewritten in place
    assert sorted(os.listdir(tmp_path)) == ["leader-epoch-checkpoint"]


def test_failed_write_keeps_target_and_cleans_up(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n1\n1 4\n")
    # The rename cannot replace a non-empty directory: the write fails, the old file stays intact.
    blocker = tmp_path / "dir"
    (blocker / "child").mkdir(parents=True)
    with pytest.raises(OSError):
        LeaderEpochCache([(2, 8)]).write_checkpoint(blocker)
    assert not (tmp_path / "dir.tmp").exists()
    assert path.read_text() == "0\n1\n1 4\n"


@pytest.mark.parametrize(
    "content",
    [b"", b"0\n", b"0\n0\n", b"0\n0"],
    ids=["empty", "version-only", "zero-entries", "no-final-newline"],
)
def test_read_files_without_entries(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "cp"
    path.write_bytes(content)
    assert LeaderEpochCache.read_checkpoint(path) == LeaderEpochCache()


def test_read_repairs_non_monotonic_file_without_rewriting(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    content = b"0\n3\n0 0\n3 10\n2 12\n"
    path.write_bytes(content)
    assert LeaderEpochCache.read_checkpoint(path).entries() == [(0, 0), (2, 12)]
    assert path.read_bytes() == content


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        (b"1\n0\n", 1, "unsupported version 1"),
        (b"zero\n", 1, "not an integer"),
        (b"0\nmany\n", 2, "entry count"),
        (b"0\n-3\n", 2, "entry count"),
        (b"0\n2\n0 0\n", 2, "says 2 but the file has 1"),
        (b"0\n18446744073709551615\n0 0\n", 2, "the file has 1"),
        (b"0\n1\n0\n", 3, "expected"),
        (b"0\n1\n0 0 0\n", 3, "expected"),
        (b"0\n1\n0,0\n", 3, "expected"),
        (b"0\n2\n0 0\n\n", 4, "expected"),
        (b"0\n1\nx 0\n", 3, "epoch"),
        (b"0\n1\n0 1.5\n", 3, "start offset"),
        (b"0\n1\n2147483648 0\n", 3, "32-bit"),
        (b"0\n1\n-1 0\n", 3, "negative"),
        (b"0\n1\n0 \xff\xfe\n", 3, "UTF-8"),
    ],
)
def test_read_malformed_names_line_and_reason(tmp_path: Path, content: bytes, line: int, reason: str) -> None:
    path = tmp_path / "cp"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=reason) as info:
        LeaderEpochCache.read_checkpoint(path)
    assert info.value.line == line
    assert reason in info.value.reason
    assert f"line {line}" in str(info.value)
    assert isinstance(info.value, EpochGuardError)


def test_read_rejects_oversized_file(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    with path.open("wb") as f:
        f.truncate(64 * 1024 * 1024 + 1)  # sparse: no disk used
    with pytest.raises(CheckpointError, match="larger than") as info:
        LeaderEpochCache.read_checkpoint(path)
    assert info.value.line == 0


def test_read_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LeaderEpochCache.read_checkpoint(tmp_path / "absent")


def test_read_directory_is_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        LeaderEpochCache.read_checkpoint(tmp_path)

