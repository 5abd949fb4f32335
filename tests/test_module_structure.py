"""The package's shape: modules by Kafka's sides, arrows pointing down, no import cycle.

Every `import` and `from ... import` of every module counts, wherever it is: at the top, under
`if TYPE_CHECKING:` or inside a function (a lazy import hides a cycle, it does not remove it). From
the bottom up: the Rust core; the value types, the one exception tree and the record-batch face of the
core; `protocol` (what crosses the wire); `storage` (the log); `broker` and `client` (the state
machines of each side, which do not know each other); the faces `sim`, `wire` and `spark` on top
(`wire` and `spark` drive the simulator; no state machine imports a face).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import epochguard

PACKAGE = Path(epochguard.__file__).parent

# Each part of the package, and the parts it may import (its own always).
_BASE = {"_core", "types", "errors", "records"}
_STATE_MACHINES = _BASE | {"protocol", "storage", "broker", "client"}
MAY_IMPORT: dict[str, set[str]] = {
    "_core": set(),
    "types": {"_core"},
    "errors": {"_core", "types"},
    "records": {"_core", "types", "errors"},
    "protocol": _BASE,
    "storage": _BASE,
    "broker": _BASE | {"protocol", "storage"},
    "client": _BASE | {"protocol", "storage"},
    "sim": _STATE_MACHINES,
    "wire": _STATE_MACHINES | {"sim", "kafka"},  # kafka: compat --cluster kafka drives a real cluster
    "spark": _STATE_MACHINES | {"sim"},
    "ops": _STATE_MACHINES,  # incident response on live clusters: watch, recover
    "kafka": _BASE,  # a real Apache Kafka cluster driven from outside (processes, admin requests)
}
FACES = ("sim", "wire", "spark", "kafka", "ops")
# The client's sans-IO state machines: whatever network code the client gains sits beside them and
# drives them; they never import it.
SANS_IO_CLIENT = ("epochguard.client.consumer", "epochguard.client.metadata")
SANS_IO_PARTS = ("types", "errors", "records", "protocol", "storage", "broker")
IO_MODULES = {"asyncio", "socket", "ssl", "selectors", "socketserver", "threading", "concurrent", "subprocess"}


def modules(package: Path, name: str = "epochguard") -> dict[str, Path]:
    """Every module of the package by dotted name (packages by their `__init__`; `_core` by its stub)."""
    found: dict[str, Path] = {}
    for path in sorted([*package.rglob("*.py"), *package.rglob("*.pyi")]):
        parts = [name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        dotted = ".".join(parts)
        if path.suffix == ".py" or dotted not in found:
            found[dotted] = path
    return found


def imported_names(path: Path, module: str, is_package: bool) -> Iterable[str]:
    """Every name an import statement anywhere in the file brings in, as absolute dotted names: for
    `from a.b import c`, `a.b.c` (which is the module `a.b.c` if there is one, else a name of `a.b`).
    Parent packages, which Python initialises first, are not counted: a package's `__init__` that
    imports its own submodules would otherwise close a cycle with each of them."""
    here = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            yield from (f"{source}.{alias.name}" for alias in node.names)


def import_graph(package: Path, name: str = "epochguard") -> dict[str, set[str]]:
    """module -> the package's modules it imports (the module itself, or the nearest enclosing one)."""
    mods = modules(package, name)

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in mods:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: dict[str, set[str]] = {}
    for module, path in mods.items():
        if path.suffix == ".pyi":
            graph[module] = set()
            continue
        targets = {resolve(n) for n in imported_names(path, module, path.name == "__init__.py")
                   if n == name or n.startswith(name + ".")}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_path_within(graph, sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _path_within(graph: Mapping[str, set[str]], component: list[str]) -> list[str]:
    """A closed path through `component` from its first module back to it (breadth first)."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"no cycle through {component}")


def part(module: str) -> str | None:
    """`epochguard.broker.fetcher` -> "broker"; None for the package itself and `__main__` (the top)."""
    rest = module.split(".")[1:]
    return rest[0] if rest and rest[0] != "__main__" else None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(PACKAGE)


def test_the_package_has_no_import_cycle(graph):
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


def test_arrows_point_down(graph):
    assert {part(m) for m in graph} - {None} == set(MAY_IMPORT), "a new part of the package needs a rule here"
    wrong = sorted(
        f"{m} -> {t}" for m, targets in graph.items() for t in targets
        if part(m) is not None and part(t) != part(m) and part(t) not in MAY_IMPORT[part(m)]  # type: ignore[index]
    )
    assert wrong == []


def test_no_state_machine_imports_a_face(graph):
    faces = {m for m in graph if part(m) in FACES}
    machines = {m for m in graph if part(m) not in (*FACES, None)}
    assert sorted((m, t) for m in machines for t in graph[m] & faces) == []


def test_broker_and_client_do_not_know_each_other(graph):
    assert sorted((m, t) for m, ts in graph.items() for t in ts if {part(m), part(t)} == {"broker", "client"}) == []


def test_the_client_state_machines_are_sans_io(graph):
    """No I/O in the state machines (the simulator and the wire server drive them), and the client's
    sans-IO part never reaches into the client code that will do the I/O."""
    for module, path in modules(PACKAGE).items():
        if path.suffix == ".py" and (part(module) in SANS_IO_PARTS or module.startswith(SANS_IO_CLIENT)):
            top = {n.split(".")[0] for n in imported_names(path, module, path.name == "__init__.py")}
            assert not top & IO_MODULES, (module, top & IO_MODULES)
    sans_io = {m for m in graph if m.startswith(SANS_IO_CLIENT)}
    assert sans_io and all(t.startswith(SANS_IO_CLIENT) for m in sans_io for t in graph[m] if part(t) == "client")


def test_leader_and_follower_modules_do_not_import_the_replica_manager(graph):
    """The follower gets a broker id and a broker-epoch getter, not the manager; the leader's module
    does not re-export it."""
    assert not {"epochguard.broker.fetcher", "epochguard.broker.replica_manager"} & graph["epochguard.broker.partition"]
    assert "epochguard.broker.replica_manager" not in graph["epochguard.broker.fetcher"]
    assert {"epochguard.broker.partition", "epochguard.broker.fetcher"} <= graph["epochguard.broker.replica_manager"]
    with pytest.raises(AttributeError, match=r"module 'epochguard\.broker\.partition' has no attribute 'ReplicaManager'"):
        importlib.import_module("epochguard.broker.partition").ReplicaManager  # noqa: B018


@pytest.mark.parametrize("old", [
    "epochguard.leader", "epochguard.replica", "epochguard.replica_manager", "epochguard.log", "epochguard.logdir",
    "epochguard.logdir_format", "epochguard.coordinator", "epochguard.classic_group", "epochguard.metadata",
    "epochguard.messages", "epochguard.api_versions", "epochguard.consumer",
])
def test_the_flat_module_paths_are_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_the_public_names_stay_at_the_top():
    from epochguard.broker.fetcher import ReplicaFetcher
    from epochguard.broker.partition import Partition
    from epochguard.broker.replica_manager import ReplicaManager
    from epochguard.client.consumer import Consumer
    from epochguard.client.metadata import ClientMetadata
    from epochguard.storage.log import PartitionLog

    assert (epochguard.Partition, epochguard.ReplicaFetcher, epochguard.ReplicaManager, epochguard.Consumer,
            epochguard.ClientMetadata, epochguard.PartitionLog) == (
        Partition, ReplicaFetcher, ReplicaManager, Consumer, ClientMetadata, PartitionLog)


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_lazy_import_cycle_is_found(tmp_path):
    """A cycle closed by a function-local import, through a relative import and a TYPE_CHECKING one."""
    pkg = _package(tmp_path / "pkg", {
        "__init__.py": "",
        "a.py": "from pkg.b import x\n",
        "b.py": "x = 1\ndef f():\n    from . import c\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import y\n",
        "d.py": "import pkg.a\n",
    })
    assert cycles(import_graph(pkg, "pkg")) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_names_resolve_to_their_module_or_the_enclosing_one(tmp_path):
    pkg = _package(tmp_path / "pkg", {
        "__init__.py": "from pkg.sub import mod\n",
        "sub/__init__.py": "",
        "sub/mod.py": "import pkg\nfrom pkg import sub\nfrom pkg.sub.mod import nothing\nfrom ..sub import thing\nimport os\n",
        "sub/other.py": "from .mod import *\n",
    })
    assert import_graph(pkg, "pkg") == {
        "pkg": {"pkg.sub.mod"}, "pkg.sub": set(), "pkg.sub.mod": {"pkg", "pkg.sub"}, "pkg.sub.other": {"pkg.sub.mod"},
    }
