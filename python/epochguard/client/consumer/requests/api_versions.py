"""ApiVersions: learn what each broker serves (Kafka's `NetworkClient` handshake into `ApiVersions`).

Every broker the metadata lists, and every leader a validation waits on, is asked once; the answer is
kept in `ConsumerContext.api_versions` until a request to that broker fails (Kafka forgets a node's
versions on disconnect). A broker that refuses the request version answers at v0 with its own
ApiVersions range; the request is retried at once at the newest version it lists (v0 if it lists none).
Any other failure is where Kafka's `NetworkClient` disconnects: the handshake starts over after the
back-off at the newest version, as on a new connection.
"""

from __future__ import annotations

from epochguard.client.consumer.requests.base import (
    ClientRequest,
    ClientResponse,
    ConsumerContext,
    RequestManager,
)
from epochguard.client.consumer.subscription import FetchState
from epochguard.errors import Errors
from epochguard.protocol.api_versions import ApiKey, ApiVersionsRequest, ApiVersionsResponse

__all__ = ["ApiVersionsManager"]

_LATEST = ApiVersionsRequest().version


class ApiVersionsManager(RequestManager[None]):
    def __init__(self, ctx: ConsumerContext) -> None:
        super().__init__(ctx)
        self._retry: dict[int, tuple[int, int]] = {}  # node -> (not before ms, request version)

    def forget(self, node_id: int) -> None:
        self.ctx.api_versions.pop(node_id, None)

    def _wanted(self) -> list[int]:
        if not self.ctx.kip320:
            return []  # nothing a pre-KIP-320 consumer sends depends on the broker's versions
        nodes = set(self.ctx.metadata.brokers)
        for s in self.ctx.subscriptions.assignment.values():
            if s.state != FetchState.AWAIT_VALIDATION or s.position is None:
                continue
            leader = s.position.current_leader.leader
            if leader is not None:
                nodes.add(leader)
        asked = {sent.node_id for sent in self._in_flight.values()}
        return sorted(n for n in nodes if n not in self.ctx.api_versions and n not in asked)

    def poll(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        out = []
        for node in self._wanted():
            not_before, version = self._retry.get(node, (0, _LATEST))
            if now_ms >= not_before:
                out.append(self._send(node, ApiVersionsRequest(version=version), now_ms, None))
        return out

    def due_ms(self) -> int | None:
        return min((self._retry.get(node, (0, _LATEST))[0] for node in self._wanted()), default=None)

    def handle(
        self, node_id: int, request: ClientRequest, context: None, response: ClientResponse, now_ms: int
    ) -> None:
        if not isinstance(response, ApiVersionsResponse):
            return
        if response.error_code == Errors.NONE:
            self.ctx.api_versions[node_id] = response.node_api_versions
            self._retry.pop(node_id, None)
            return
        refused = response.error_code == Errors.UNSUPPORTED_VERSION
        if refused and isinstance(request, ApiVersionsRequest) and request.version > 0:
            own = response.node_api_versions.version_range(ApiKey.API_VERSIONS)
            self._retry[node_id] = (now_ms, 0 if own is None else min(own.max_version, _LATEST))
        else:
            self._start_over(node_id, now_ms)  # Kafka disconnects

    def failed(self, node_id: int, request: ClientRequest, context: None, now_ms: int) -> None:
        self._start_over(node_id, now_ms)

    def _start_over(self, node_id: int, now_ms: int) -> None:
        """As on a new connection after a disconnect: after the back-off, at the newest version."""
        self._retry[node_id] = (self.ctx.backoff(now_ms), _LATEST)
