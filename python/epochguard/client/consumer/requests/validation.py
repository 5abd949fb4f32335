"""Position validation with OffsetsForLeaderEpoch (Kafka's `OffsetFetcher.validatePositionsAsync` and
`OffsetFetcherUtils.onSuccessfulResponseForValidatingPositions`), KIP-320.

On every metadata version it has not seen (the first call included, as Kafka's `metadataUpdateVersion`
starts at -1) each position is re-pointed at the current leader. A position awaiting validation is
sent to its leader once its ApiVersions are known: OffsetForLeaderEpoch older than v3 completes the
validation without a request. A position that moves while its request is in flight is asked again at
once (a second leader change does not wait for the first answer). The answer goes through the pure
`validator`; truncations under policy none are raised together as one `LogTruncationError`, with a
divergent offset only where one is known.

Under the context's `send_last_fetched_epoch`, a leader with Fetch v12+ is not asked: the position goes
to fetching and the Fetch's LastFetchedEpoch validates it; a DivergingEpoch answer comes back here
(`complete_diverging`) and is applied as the OffsetsForLeaderEpoch answer would be.
"""

from __future__ import annotations

from epochguard.client.consumer.requests.base import (
    ClientRequest,
    ClientResponse,
    ConsumerContext,
    RequestManager,
)
from epochguard.client.consumer.requests.fetch import fetches_last_epoch
from epochguard.client.consumer.subscription import FetchState, PartitionState
from epochguard.client.consumer.validator import (
    Reset,
    Resume,
    Rewind,
    Truncated,
    validate_position,
)
from epochguard.errors import Errors, LogTruncationError, TopicAuthorizationFailedError
from epochguard.protocol.api_versions import ApiKey, has_usable_offset_for_leader_epoch_version
from epochguard.protocol.messages import (
    OFFSET_FOR_LEADER_EPOCH_VERSION,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from epochguard.types import (
    FetchPosition,
    OffsetAndMetadata,
    TopicPartition,
    TruncationEvent,
    TruncationResolution,
    epoch_or_sentinel,
)

__all__ = ["ValidationManager"]

_Positions = dict[TopicPartition, FetchPosition]


class ValidationManager(RequestManager[_Positions]):
    def __init__(self, ctx: ConsumerContext) -> None:
        super().__init__(ctx)
        self._metadata_update_version = -1

    # --- re-pointing positions --------------------------------------------------------------------
    def validate_positions_on_metadata_change(self) -> None:
        """`validatePositionsOnMetadataChange`: on a metadata version not seen yet, whoever updated the
        cache, re-point each position at the current leader."""
        if self._metadata_update_version == self.ctx.metadata.updates:
            return
        self._metadata_update_version = self.ctx.metadata.updates
        for tp in list(self.ctx.subscriptions):
            self.maybe_validate(tp)

    def maybe_validate(self, tp: TopicPartition) -> bool:
        current = self.ctx.metadata.current_leader(tp)
        versions = None if current.leader is None else self.ctx.api_versions.get(current.leader)
        return self.ctx.subscriptions.maybe_validate_position_for_current_leader(tp, current, versions)

    # --- requests ---------------------------------------------------------------------------------
    def _asked(self) -> dict[TopicPartition, FetchPosition]:
        asked: dict[TopicPartition, FetchPosition] = {}
        for positions in self._sent_contexts():
            asked.update(positions)
        return asked

    def _due(self, now_ms: int | None) -> dict[int, list[tuple[TopicPartition, FetchPosition]]]:
        """Positions to send now (`now_ms` None: regardless of backoff), by leader."""
        groups: dict[int, list[tuple[TopicPartition, FetchPosition]]] = {}
        if not self.ctx.kip320:
            return groups
        asked = self._asked()
        for tp, s in self.ctx.subscriptions.items():
            if s.state != FetchState.AWAIT_VALIDATION or s.position is None or asked.get(tp) == s.position:
                continue
            if now_ms is not None and now_ms < s.next_retry_ms:
                continue
            leader = s.position.current_leader.leader
            if leader is None:
                self.ctx.metadata.request_update()  # e.g. waiting for metadata to reach a committed epoch
                continue
            groups.setdefault(leader, []).append((tp, s.position))
        return groups

    def poll(self, now_ms: int) -> list[tuple[int, ClientRequest]]:
        out = []
        for node, entries in sorted(self._due(now_ms).items()):
            versions = self.ctx.api_versions.get(node)
            if versions is None:
                continue  # wait for the broker's ApiVersions answer
            if not has_usable_offset_for_leader_epoch_version(versions):
                for tp, position in entries:  # `completeValidation`: this broker cannot validate
                    self.ctx.subscriptions.state(tp).transition(FetchState.FETCHING, position)
                continue
            if fetches_last_epoch(self.ctx, node):
                for tp, position in entries:  # the Fetch validates (LastFetchedEpoch): no round trip here
                    self.ctx.subscriptions.state(tp).transition(FetchState.FETCHING, position)
                continue
            parts = tuple(
                OffsetForLeaderPartition(
                    tp.topic,
                    tp.partition,
                    epoch_or_sentinel(pos.offset_epoch),
                    epoch_or_sentinel(pos.current_leader.epoch),
                )
                for tp, pos in entries
            )
            version = versions.latest_usable_version(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, OFFSET_FOR_LEADER_EPOCH_VERSION)
            out.append(self._send(node, OffsetsForLeaderEpochRequest(parts, version=version), now_ms, dict(entries)))
        return out

    def due_ms(self) -> int | None:
        times = [
            self.ctx.subscriptions.state(tp).next_retry_ms
            for node, entries in self._due(None).items()
            if node in self.ctx.api_versions
            for tp, _ in entries
        ]
        return min(times, default=None)

    # --- answers ----------------------------------------------------------------------------------
    def failed(self, node_id: int, request: ClientRequest, context: _Positions, now_ms: int) -> None:
        self.ctx.subscriptions.request_failed(context, self.ctx.backoff(now_ms))
        self.ctx.metadata.request_update()

    def handle(
        self, node_id: int, request: ClientRequest, context: _Positions, response: ClientResponse, now_ms: int
    ) -> None:
        if not isinstance(response, OffsetsForLeaderEpochResponse):
            return
        truncated: dict[TopicPartition, tuple[int, OffsetAndMetadata | None]] = {}
        for answer in response.partitions:
            request_position = context.get(answer.tp)
            s = self.ctx.subscriptions.get(answer.tp)
            if request_position is None or s is None:
                continue
            if answer.error_code != Errors.NONE:
                if answer.error_code == Errors.TOPIC_AUTHORIZATION_FAILED:
                    error = TopicAuthorizationFailedError(f"not authorized to describe {answer.tp.topic}")
                    self.ctx.errors.append(error)
                elif answer.error_code != Errors.UNKNOWN_LEADER_EPOCH:
                    self.ctx.metadata.request_update()
                s.next_retry_ms = self.ctx.backoff(now_ms)
                continue
            if s.state != FetchState.AWAIT_VALIDATION or s.position != request_position:
                continue  # stale: the position moved since the request
            self._complete(answer.tp, s, request_position, answer.leader_epoch, answer.end_offset, now_ms, truncated)
        self._raise(truncated)

    def complete_diverging(self, tp: TopicPartition, position: FetchPosition, epoch: int, end_offset: int,
                           now_ms: int) -> None:
        """A Fetch from `position` answered with DivergingEpoch (`epoch`, `end_offset`): the leader's
        answer for the position's epoch, applied as an OffsetsForLeaderEpoch answer. On resume the
        position takes the leader's epoch, so the next Fetch does not diverge again on an epoch alone."""
        s = self.ctx.subscriptions.get(tp)
        if s is None or s.position != position:
            return
        truncated: dict[TopicPartition, tuple[int, OffsetAndMetadata | None]] = {}
        self._complete(tp, s, position, epoch, end_offset, now_ms, truncated)
        if s.state == FetchState.FETCHING and s.position == position and not truncated and epoch >= 0:
            s.position = FetchPosition(position.offset, epoch, position.current_leader)
        self._raise(truncated)

    def _raise(self, truncated: dict[TopicPartition, tuple[int, OffsetAndMetadata | None]]) -> None:
        if truncated:
            # One pending at a time, the newest (Kafka's `cachedValidatePositionsException`): a network driver
            # re-validates after the back-off while the application is away, and each answer would queue
            # the same truncation again, raised once per poll after the application had already seeked.
            self.ctx.errors[:] = [e for e in self.ctx.errors if not isinstance(e, LogTruncationError)]
            self.ctx.errors.append(
                LogTruncationError(
                    offset_out_of_range_partitions={tp: offset for tp, (offset, _) in truncated.items()},
                    divergent_offsets={tp: div for tp, (_, div) in truncated.items() if div is not None},
                )
            )

    def _complete(
        self,
        tp: TopicPartition,
        s: PartitionState,
        position: FetchPosition,
        epoch: int,
        end_offset: int,
        now_ms: int,
        truncated: dict[TopicPartition, tuple[int, OffsetAndMetadata | None]],
    ) -> None:
        """`maybeCompleteValidation`: apply the validator's outcome."""
        outcome = validate_position(position, s.reset_policy, epoch, end_offset, s.consumed)
        if isinstance(outcome, Resume):
            s.transition(FetchState.FETCHING, position)
        elif isinstance(outcome, Rewind):
            self._report(tp, s, position, outcome.position.offset, outcome.position.offset_epoch, "rewound", now_ms)
            if outcome.final:
                s.seek_validated(outcome.position)
            else:
                s.seek_unvalidated(outcome.position)
            if outcome.history is not None:
                s.consumed = outcome.history
        elif isinstance(outcome, Reset):
            self._report(tp, s, position, None, None, "reset", now_ms)
            s.request_reset(s.reset_policy, "truncation")
        elif isinstance(outcome, Truncated):
            div = outcome.divergent
            div_offset, div_epoch = (None, None) if div is None else (div.offset, div.leader_epoch)
            self._report(tp, s, position, div_offset, div_epoch, "raised", now_ms)
            truncated[tp] = (position.offset, div)
            s.next_retry_ms = self.ctx.backoff(now_ms)

    def _report(
        self,
        tp: TopicPartition,
        s: PartitionState,
        position: FetchPosition,
        divergent_offset: int | None,
        divergent_epoch: int | None,
        resolution: TruncationResolution,
        now_ms: int,
    ) -> None:
        key = (position, divergent_offset, divergent_epoch)
        if s.reported_truncation == key:
            return  # the same truncation seen again (policy none retries): report it once
        s.reported_truncation = key
        affected = None if divergent_offset is None else position.offset - divergent_offset
        event = TruncationEvent(tp, position, divergent_offset, divergent_epoch, affected, resolution, now_ms)
        self.ctx.truncations.append(event)
