"""Module seams: ReplicaManager lives in its own module, and neither the leader nor the follower
module imports it (the follower gets a broker id and a broker-epoch getter, not the manager)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import epochguard

PACKAGE = Path(epochguard.__file__).parent


def runtime_imports(module: str) -> set[str]:
    """Modules imported at import time (not under `if TYPE_CHECKING:` and not inside functions)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_leader_replica_import_cycle():
    assert not {"epochguard.replica", "epochguard.replica_manager"} & runtime_imports("leader")
    assert not {"epochguard.leader", "epochguard.replica_manager"} & runtime_imports("replica")
    assert {"epochguard.leader", "epochguard.replica"} <= runtime_imports("replica_manager")


def test_replica_manager_keeps_its_old_import_path():
    from epochguard.leader import ReplicaManager as old
    from epochguard.replica_manager import ReplicaManager

    assert old is ReplicaManager is epochguard.ReplicaManager


def test_follower_reads_the_broker_epoch_through_its_getter():
    from protocol_support import TP, state

    from epochguard.messages import FetchRequest
    from epochguard.replica_manager import ReplicaManager

    rm = ReplicaManager(2, broker_epoch=7)
    rm.apply_partition_state(state(1, 1, isr=(1, 2), replicas=(1, 2), tp=TP), 0)
    rm.broker_epoch = 9  # re-registered: the next fetch carries the new epoch
    [fetch] = [r for _, r in rm.poll_requests(0) if isinstance(r, FetchRequest)]
    assert fetch.replica_id == 2 and fetch.replica_epoch == 9


def test_any_other_missing_name_of_the_leader_module_is_an_attribute_error():
    import epochguard.leader

    with pytest.raises(AttributeError, match=r"module 'epochguard\.leader' has no attribute 'ReplicaFetcher'"):
        epochguard.leader.ReplicaFetcher  # noqa: B018
