"""What every simulated client shares: a metadata cache (epochguard.client.metadata), request bookkeeping, timeouts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from epochguard.client.metadata import ClientMetadata, MetadataUpdate
from epochguard.protocol.messages import MetadataRequest, MetadataResponse
from epochguard.sim.events import MetadataAccepted
from epochguard.sim.network import Disconnected, Envelope, broker_node

if TYPE_CHECKING:
    from epochguard.sim.context import ActorContext


class Client:
    """A client node. Subclasses implement `work()` and `on_response()`.

    Metadata requests go to the brokers in turn (round robin), so a broker serving stale metadata is
    asked sooner or later, as a real client's "least loaded node" would.
    """

    def __init__(self, name: str, ctx: ActorContext) -> None:
        self.name = name
        self.ctx = ctx
        cfg = ctx.config
        self.metadata = ClientMetadata(
            protocol=ctx.protocol,
            topics=[cfg.topic],
            refresh_backoff_ms=cfg.metadata_backoff_ms,
            metadata_max_age_ms=cfg.metadata_max_age_ms,
        )
        self._metadata_in_flight: int | None = None
        self._next_metadata_broker = 0
        self._pending: dict[int, tuple[str, Any, int]] = {}  # msg id -> (kind, context, sent at)

    @property
    def now_ms(self) -> int:
        return self.ctx.clock.now_ms

    # --- requests --------------------------------------------------------------------------------
    def send(self, broker: int, payload: Any, kind: str, context: Any = None) -> int:
        msg_id = self.ctx.network.send(self.name, broker_node(broker), payload)
        self._pending[msg_id] = (kind, context, self.now_ms)
        return msg_id

    def in_flight(self, kind: str, context: Any = None) -> bool:
        return any(k == kind and c == context for k, c, _ in self._pending.values())

    def receive(self, env: Envelope) -> None:
        if env.reply_to is None or env.reply_to not in self._pending:
            return  # not an answer to anything we still wait for (late, after a timeout)
        kind, context, _ = self._pending.pop(env.reply_to)
        if isinstance(env.payload, Disconnected):
            if kind == "metadata":
                self._metadata_in_flight = None
                self.metadata.failed_update(self.now_ms)
            else:
                self.on_timeout(kind, context)
            return
        if kind == "metadata":
            self._metadata_in_flight = None
            self._on_metadata(env.payload)
        else:
            self.on_response(kind, context, env.payload, int(env.src.rsplit("-", 1)[1]))

    def tick(self) -> None:
        now = self.now_ms
        for msg_id, (kind, context, sent) in list(self._pending.items()):
            if now - sent >= self.ctx.config.request_timeout_ms:
                del self._pending[msg_id]
                if kind == "metadata":
                    self._metadata_in_flight = None
                    self.metadata.failed_update(now)
                else:
                    self.on_timeout(kind, context)
        if self._metadata_in_flight is None and self.metadata.should_update(now):
            brokers = self.ctx.broker_ids
            broker = brokers[self._next_metadata_broker % len(brokers)]
            self._next_metadata_broker += 1
            request: MetadataRequest = self.metadata.build_request(now)
            self._metadata_in_flight = self.send(broker, request, "metadata")
        self.work()

    def _on_metadata(self, response: MetadataResponse) -> None:
        update = self.metadata.update(response, self.now_ms)
        for tp in update.accepted:
            meta = self.metadata.partition_metadata(tp)
            if meta is not None:
                self.ctx.events.publish(MetadataAccepted(self.name, tp, meta.leader_id, meta.leader_epoch))
        if update.rejected:
            self.ctx.events.record(
                "metadata", self.name, f"rejected stale metadata for {', '.join(map(str, update.rejected))}",
                rejected=[str(tp) for tp in update.rejected],
            )
        self.on_metadata(update)

    # --- for subclasses --------------------------------------------------------------------------
    def work(self) -> None:
        """Send whatever is due this step."""

    def on_metadata(self, update: MetadataUpdate) -> None:
        """Called after each metadata response was applied."""

    def on_response(self, kind: str, context: Any, response: Any, broker: int) -> None:
        raise NotImplementedError

    def on_timeout(self, kind: str, context: Any) -> None:
        """A request got no answer within request.timeout.ms: refresh metadata, then retry."""
        self.metadata.request_update()
