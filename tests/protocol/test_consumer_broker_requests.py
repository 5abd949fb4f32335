"""The consumer's requests about brokers rather than partitions, driven through the public `Consumer`
with hand-made answers: the ApiVersions handshake (Kafka's `NetworkClient` into `ApiVersions`: who is
asked, a refused version retried at the broker's, other errors and lost requests retried after the
back-off at the newest version, as on a new connection), Metadata refreshes (one at a time, to the
brokers in turn, the attempt recorded when sent), and partitions grouped by leader for ListOffsets."""

from __future__ import annotations

import pytest
from consumer_requests_support import BACKOFF, EPOCH, TIMEOUT, TP0, TP1, known_consumer

from epochguard import Consumer
from epochguard.errors import Errors
from epochguard.protocol.api_versions import (
    BROKER_API_VERSIONS,
    ApiKey,
    ApiVersionRange,
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from epochguard.protocol.messages import ListOffsetsRequest, MetadataRequest, MetadataResponse, MetadataResponseBroker
from epochguard.types import FetchPosition, LeaderAndEpoch

LATEST = ApiVersionsRequest().version


def asked(c: Consumer, now_ms: int) -> list[tuple[int, int]]:
    """(node, version) of each ApiVersions request `poll_requests` sends now."""
    return [(node, r.version) for node, r in c.poll_requests(now_ms) if isinstance(r, ApiVersionsRequest)]


def one_api_versions(c: Consumer, now_ms: int) -> tuple[int, ApiVersionsRequest]:
    [(node, request)] = [(n, r) for n, r in c.poll_requests(now_ms) if isinstance(r, ApiVersionsRequest)]
    return node, request


def refused(max_version: int | None) -> ApiVersionsResponse:
    """UNSUPPORTED_VERSION at v0, listing the ApiVersions range the broker serves (none: no range)."""
    ranges = () if max_version is None else (ApiVersionRange(ApiKey.API_VERSIONS, 0, max_version),)
    return ApiVersionsResponse(ranges, Errors.UNSUPPORTED_VERSION, version=0)


# --- who is asked ------------------------------------------------------------------------------------
def test_the_leader_a_validation_waits_on_is_asked_even_when_the_metadata_does_not_list_it():
    c = known_consumer([TP0, TP1])
    c.seek(TP0, 0)  # fetching from broker 1: needs no versions
    c.seek_position(TP1, FetchPosition(10, EPOCH - 1, LeaderAndEpoch(9, EPOCH)))  # awaits validation at 9
    assert c.awaiting_validation(TP1)
    assert asked(c, 0) == [(9, LATEST)]


def test_the_leader_of_a_fetching_position_is_not_asked():
    c = known_consumer([TP0])
    c.seek_position(TP0, FetchPosition(10, None, LeaderAndEpoch(9, EPOCH)), validate=False)
    assert asked(c, 0) == []


def test_a_pre_kip320_consumer_asks_nobody():
    c = known_consumer([TP0], protocol="pre-kip-320")
    c.forget_api_versions(1)
    assert asked(c, 0) == []


def test_a_broker_whose_versions_are_unknown_is_asked_at_once_and_only_once():
    c = known_consumer([])
    c.forget_api_versions(2)
    assert c.next_deadline_ms() == 0
    assert asked(c, 0) == [(2, LATEST)]
    assert asked(c, 0) == []  # in flight


# --- answers -----------------------------------------------------------------------------------------
def test_a_refused_version_is_retried_at_once_at_the_broker_s_newest():
    c = known_consumer([])
    c.forget_api_versions(2)
    node, request = one_api_versions(c, 0)
    c.on_response(node, request, refused(2), 10)
    assert asked(c, 10) == [(2, 2)]


def test_a_refusal_above_our_newest_version_is_retried_at_ours():
    c = known_consumer([])
    c.forget_api_versions(2)
    node, request = one_api_versions(c, 0)
    c.on_response(node, request, refused(LATEST + 5), 10)
    assert asked(c, 10) == [(2, LATEST)]


def test_a_refusal_that_lists_no_range_is_retried_at_once_at_v0():
    """NetworkClient.handleApiVersionsResponse: without the broker's ApiVersions range, fall back to v0."""
    c = known_consumer([])
    c.forget_api_versions(2)
    node, request = one_api_versions(c, 0)
    c.on_response(node, request, refused(None), 10)
    assert asked(c, 10) == [(2, 0)]


def test_refusals_step_down_until_v0_and_a_refused_v0_starts_over_after_the_backoff():
    c = known_consumer([])
    c.forget_api_versions(2)
    versions = []
    for now, answer in ((10, refused(1)), (11, refused(0)), (12, refused(0))):
        node, request = one_api_versions(c, now)
        versions.append(request.version)
        c.on_response(node, request, answer, now)
    assert versions == [LATEST, 1, 0]
    assert asked(c, 12 + BACKOFF - 1) == []  # v0 refused: Kafka disconnects
    assert asked(c, 12 + BACKOFF) == [(2, LATEST)]


@pytest.mark.parametrize(
    "response",
    [
        ApiVersionsResponse((ApiVersionRange(ApiKey.API_VERSIONS, 0, 1),), Errors.UNKNOWN_SERVER_ERROR),
        ApiVersionsResponse((), Errors.UNKNOWN_SERVER_ERROR),
    ],
    ids=["with-range", "without-range"],
)
def test_another_failure_is_retried_after_the_backoff_at_the_newest_version(response):
    c = known_consumer([])
    c.forget_api_versions(2)
    node, request = one_api_versions(c, 0)
    c.on_response(node, request, response, 10)
    assert c.node_api_versions(2) is None
    assert c.next_deadline_ms() == 10 + BACKOFF
    assert asked(c, 10 + BACKOFF - 1) == []
    assert asked(c, 10 + BACKOFF) == [(2, LATEST)]


def test_a_lost_request_is_retried_after_the_backoff_at_the_newest_version():
    """As Kafka's NetworkClient: a disconnect forgets the node, the next connection starts the handshake
    at the newest version again (the broker may have been upgraded meanwhile)."""
    c = known_consumer([])
    c.forget_api_versions(2)
    node, request = one_api_versions(c, 0)
    c.on_response(node, request, refused(2), 10)
    node, request = one_api_versions(c, 10)
    assert request.version == 2
    c.on_request_failed(node, request, 20)
    assert asked(c, 20 + BACKOFF - 1) == []
    assert asked(c, 20 + BACKOFF) == [(2, LATEST)]


def test_after_an_answer_a_later_handshake_starts_again_at_the_newest_version():
    c = known_consumer([])
    c.forget_api_versions(2)
    node, request = one_api_versions(c, 0)
    c.on_response(node, request, refused(2), 10)
    node, request = one_api_versions(c, 10)
    c.on_response(node, request, ApiVersionsResponse(tuple(BROKER_API_VERSIONS), version=2), 11)
    assert c.node_api_versions(2) == BROKER_API_VERSIONS
    c.forget_api_versions(2)  # as after a disconnect
    assert asked(c, 12) == [(2, LATEST)]


# --- Metadata ----------------------------------------------------------------------------------------
def metadata_targets(c: Consumer, rounds: int, brokers: tuple[int, ...] = ()) -> list[int]:
    """The node each of `rounds` metadata refreshes goes to (each answered, then another requested)."""
    nodes = []
    now = 0
    for _ in range(rounds):
        [(node, request)] = [(n, r) for n, r in c.poll_requests(now) if isinstance(r, MetadataRequest)]
        nodes.append(node)
        c.on_response(node, request, MetadataResponse((), tuple(MetadataResponseBroker(b) for b in brokers)), now)
        c.metadata.request_update()
        now += BACKOFF
    return nodes


def test_metadata_goes_to_the_bootstrap_nodes_in_turn_starting_with_the_first():
    c = Consumer(bootstrap=(7, 3, 5), retry_backoff_ms=BACKOFF, protocol="pre-kip-320")
    assert metadata_targets(c, 4) == [7, 3, 5, 7]


def test_metadata_goes_to_the_known_brokers_in_turn_once_there_are_some():
    c = Consumer(bootstrap=(7,), retry_backoff_ms=BACKOFF, protocol="pre-kip-320")
    assert metadata_targets(c, 5, brokers=(4, 2, 6)) == [7, 4, 6, 2, 4]  # sorted brokers, turn goes on


def test_one_metadata_request_at_a_time_and_no_deadline_of_its_own_while_it_is_out():
    c = known_consumer([])
    c.metadata.request_update()
    [(_, request)] = c.poll_requests(50)
    assert isinstance(request, MetadataRequest)
    c.metadata.request_update()
    assert c.poll_requests(50 + BACKOFF) == []
    assert c.next_deadline_ms() == 50 + TIMEOUT  # only the request's timeout
    # the attempt was recorded when sent: a refresh asked for now waits the back-off from then
    assert c.metadata.next_update_ms() == 50 + BACKOFF


# --- partitions grouped by leader (ListOffsets) -------------------------------------------------------
def test_a_partition_without_a_leader_does_not_hold_back_the_resets_of_the_others():
    c = known_consumer([TP0, TP1], {TP0: -1, TP1: 2})
    c.seek_to_beginning(TP0)
    c.seek_to_beginning(TP1)
    requests = c.poll_requests(0)
    assert [(node, [p.tp for p in r.partitions]) for node, r in requests if isinstance(r, ListOffsetsRequest)] == [
        (2, [TP1])
    ]
    assert any(isinstance(r, MetadataRequest) for _, r in c.poll_requests(0))
