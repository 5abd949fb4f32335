"""Metadata refreshes (Kafka's `NetworkClient.DefaultMetadataUpdater` for the consumer's `Metadata`).

One request at a time, when `ClientMetadata` says a refresh is due (requested, or aged out), to the node
`ClientMetadata.any_node` picks (the network's least loaded node, or the brokers in turn), so one dead
node cannot starve refreshes; with every node in its reconnect back-off, after the refresh back-off.
"""

from __future__ import annotations

from epochguard.client.consumer.requests.base import (
    ClientRequest,
    ClientResponse,
    ConsumerContext,
    RequestManager,
)
from epochguard.protocol.messages import MetadataResponse

__all__ = ["MetadataManager"]


class MetadataManager(RequestManager[None]):
    def __init__(self, ctx: ConsumerContext, bootstrap: tuple[int, ...]) -> None:
        super().__init__(ctx)
        self.bootstrap = bootstrap

    def poll(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        if self._in_flight or not self.ctx.metadata.should_update(now_ms):
            return []
        node = self.ctx.metadata.any_node(self.bootstrap)
        if node is None:  # every broker in its reconnect back-off: try again after the refresh back-off
            self.ctx.metadata.failed_update(now_ms)
            return []
        return [self._send(node, self.ctx.metadata.build_request(now_ms), now_ms, None)]

    def due_ms(self) -> int | None:
        return None if self._in_flight else self.ctx.metadata.next_update_ms()

    def handle(
        self, node_id: int, request: ClientRequest, context: None, response: ClientResponse, now_ms: int
    ) -> None:
        if isinstance(response, MetadataResponse):
            self.ctx.metadata.update(response, now_ms)

    def failed(self, node_id: int, request: ClientRequest, context: None, now_ms: int) -> None:
        self.ctx.metadata.failed_update(now_ms)
