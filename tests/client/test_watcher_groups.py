"""The watcher's groups by name (issue 34): with no names (every group) or a pattern, the groups are found with
ListGroups on every broker (each answers for the groups it coordinates, as Kafka's `Admin.listConsumerGroups`
asks them all), and each consumer group among them is checked after a truncation exactly as a named one is.
Message level, on the scripted cluster of `test_watcher`; each test names the wrong rule it turns red on."""

from __future__ import annotations

from epochguard.client.watcher import LIST_GROUPS_TRIES, GroupAffected, WatchWarning, is_pattern
from epochguard.errors import Errors
from epochguard.protocol.messages import ListedGroup, ListGroupsRequest, ListGroupsResponse, Request, Response

from .test_watcher import TP, Cluster, run_round, truncations, watching


class GroupCluster(Cluster):
    """Brokers coordinate groups: broker 1 "orders" and a Connect group, broker 2 "billing" and "at"."""

    def __init__(self) -> None:
        super().__init__()
        self.coordinated = {
            1: (ListedGroup("orders", "consumer", "Empty", "classic"),
                ListedGroup("connect-cluster", "connect", "Stable", "classic")),
            2: (ListedGroup("billing", "", "Empty", "classic"),  # only commits offsets: no protocol type
                ListedGroup("at", "consumer", "Stable", "consumer")),
            3: (),
        }
        self.refuse_listing: set[int] = set()

    def _ListGroupsRequest(self, node: int, request: ListGroupsRequest) -> ListGroupsResponse:
        return ListGroupsResponse(self.coordinated[node])

    def answer(self, node: int, request: Request) -> Response | None:
        if isinstance(request, ListGroupsRequest) and node in self.refuse_listing:
            self.requests.append((node, request))
            return None
        return super().answer(node, request)


def scenario() -> GroupCluster:
    c = GroupCluster()
    c.behind(10, 10)
    c.committed = {"orders": {TP: (17, 0)}, "billing": {TP: (12, 0)}, "at": {TP: (10, 0)},
                   "connect-cluster": {TP: (15, 0)}}
    return c


def unclean(c: GroupCluster) -> None:
    c.unclean_to_2()
    c.down = set()  # brokers 1 and 3 are back (as followers) when the watcher looks


def affected(events: list) -> list[tuple[str, int, tuple[int, int]]]:
    return sorted((e.group, e.committed, e.phantoms) for e in events if isinstance(e, GroupAffected))


def test_every_consumer_group_of_every_broker_is_checked_when_none_is_named() -> None:
    """Wrong rules: listing only one broker's groups; checking a non-consumer group; a group at D affected."""
    c = scenario()
    w = watching(c, groups=None)
    assert not any(isinstance(r, ListGroupsRequest) for _, r in c.requests)  # nothing listed before a loss
    unclean(c)
    events = run_round(w, c)
    assert truncations(events) == [(10, 20, 0, 1)]
    assert affected(events) == [("billing", 12, (10, 12)), ("orders", 17, (10, 17))]
    assert sorted(n for n, r in c.requests if isinstance(r, ListGroupsRequest)) == [1, 2, 3]
    assert w.settled
    # Reported once: the next round lists nothing again.
    before = len(c.requests)
    assert run_round(w, c) == []
    assert not any(isinstance(r, ListGroupsRequest) for _, r in c.requests[before:])


def test_a_pattern_keeps_only_the_matching_groups_and_a_name_is_asked_for_directly() -> None:
    """Wrong rules: a pattern matching every group; a plain name listing the cluster's groups."""
    c = scenario()
    w = watching(c, groups=["ord*", "bill?ng"])
    unclean(c)
    assert affected(run_round(w, c)) == [("billing", 12, (10, 12)), ("orders", 17, (10, 17))]
    c2 = scenario()
    w2 = watching(c2, groups=["orders"])
    unclean(c2)
    assert affected(run_round(w2, c2)) == [("orders", 17, (10, 17))]
    assert not any(isinstance(r, ListGroupsRequest) for _, r in c2.requests)
    assert [is_pattern(g) for g in ("orders", "ord*", "b?", "[ab]c")] == [False, True, True, True]


def test_a_broker_that_cannot_list_its_groups_is_named_and_the_others_are_checked() -> None:
    """Wrong rules: one silent broker holding up every group; giving up on it without a word."""
    c = scenario()
    c.refuse_listing = {1}
    w = watching(c, groups=None)
    unclean(c)
    events = run_round(w, c)
    assert affected(events) == [("billing", 12, (10, 12))]  # broker 2's, at once
    assert not w.settled  # broker 1 is asked again next round
    for _ in range(LIST_GROUPS_TRIES - 1):
        events += run_round(w, c)
    warnings = [e.message for e in events if isinstance(e, WatchWarning)]
    assert warnings == [f"could not list the groups broker 1 coordinates (no answer, {LIST_GROUPS_TRIES} tries): "
                        "groups there were not checked for these truncations"]
    assert sum(1 for n, r in c.requests if isinstance(r, ListGroupsRequest) and n == 1) == LIST_GROUPS_TRIES
    assert w.settled


def test_a_listing_error_is_retried_like_no_answer() -> None:
    c = scenario()
    calls = {"n": 0}
    plain = c._ListGroupsRequest

    def loading(node: int, request: ListGroupsRequest) -> ListGroupsResponse:
        if node == 1 and calls["n"] == 0:
            calls["n"] += 1
            return ListGroupsResponse((), Errors.COORDINATOR_LOAD_IN_PROGRESS)
        return plain(node, request)

    c._ListGroupsRequest = loading  # type: ignore[method-assign]
    w = watching(c, groups=None)
    unclean(c)
    events = run_round(w, c) + run_round(w, c)
    assert affected(events) == [("billing", 12, (10, 12)), ("orders", 17, (10, 17))]
    assert not any(isinstance(e, WatchWarning) for e in events)
