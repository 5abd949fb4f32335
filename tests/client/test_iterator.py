"""The blocking consumer's iterator as kafka-python's (the consumer is its own iterator): a `for` loop left
with `break` and started again goes on with the next record, a commit after a `break` commits exactly
what was handed out, and `consumer_timeout_ms` is the time without a record before StopIteration. And
auto-commit as Java's: only when the application polls again, never while it holds the last poll's
records. The asyncio consumer's `async for` the same way (it is its own async iterator). Against `epochguard serve clean` (its `events` partition holds a few hundred records)."""

from __future__ import annotations

import asyncio
import itertools
import time

from epochguard.client import AsyncConsumer, KafkaConsumer, OffsetAndMetadata, TopicPartition

EVENTS_0 = TopicPartition("events", 0)


def _consumer(served, **kw) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5_000, **kw)
    consumer.assign([EVENTS_0])
    return consumer


def test_a_loop_left_with_break_goes_on_with_the_next_record(served) -> None:
    consumer = _consumer(served, enable_auto_commit=False)
    try:
        first = [r.offset for r in itertools.islice(consumer, 3)]
        for record in consumer:
            second = record.offset
            break
        third = [r.offset for r in itertools.islice(consumer, 2)]
        assert [*first, second, *third] == [0, 1, 2, 3, 4, 5]
    finally:
        consumer.close()


def test_a_commit_after_break_commits_what_was_handed_out(served) -> None:
    consumer = _consumer(served, group_id="iter-commit", enable_auto_commit=False)
    try:
        for record in consumer:
            if record.offset == 6:
                break
        consumer.commit()
        assert consumer.committed(EVENTS_0) == OffsetAndMetadata(7, "", record.leader_epoch)
        assert consumer.position(EVENTS_0) == 7
        assert next(consumer).offset == 7  # fetched again from there
    finally:
        consumer.close()


def test_consumer_timeout_ms_is_the_time_without_a_record(served) -> None:
    quiet = TopicPartition("input", 0)  # only real clients write there (serve's own producer writes `events`)
    consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, enable_auto_commit=False, consumer_timeout_ms=1_800)
    try:
        consumer.assign([quiet])
        consumer.seek_to_end(quiet)
        consumer.position(quiet)
        start = time.monotonic()
        assert list(consumer) == []
        assert 1.7 <= time.monotonic() - start < 10
    finally:
        consumer.close()


def test_auto_commit_waits_for_the_next_poll(served) -> None:
    consumer = _consumer(served, group_id="iter-auto", enable_auto_commit=True, auto_commit_interval_ms=100)
    try:
        got = {}
        end = time.monotonic() + 20
        while not got and time.monotonic() < end:
            got = consumer.poll(timeout_ms=500)
        handed = got[EVENTS_0][-1]
        time.sleep(0.6)  # well past the interval, without polling: the application still holds these
        assert consumer.committed(EVENTS_0) is None
        consumer.poll(timeout_ms=0)  # the next poll: what the last one handed out counts as processed
        end = time.monotonic() + 10
        while consumer.committed(EVENTS_0) is None and time.monotonic() < end:
            time.sleep(0.05)
        assert consumer.committed(EVENTS_0).offset >= handed.offset + 1
    finally:
        consumer.close(autocommit=False)


# --- the asyncio consumer's `async for`, the same way ------------------------------------------------------
def _run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))


async def _async_consumer(served, **kw) -> AsyncConsumer:
    consumer = AsyncConsumer(bootstrap_servers=served.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5_000, **kw)
    await consumer.assign([EVENTS_0])
    return consumer


def test_async_for_left_with_break_goes_on_with_the_next_record(served) -> None:
    async def main() -> None:
        consumer = await _async_consumer(served, enable_auto_commit=False)
        try:
            offsets = []
            for _ in range(4):  # four loops, each left after two records: the poll's rest is not dropped
                async for record in consumer:
                    offsets.append(record.offset)
                    if len(offsets) % 2 == 0:
                        break
            assert offsets == list(range(8))
        finally:
            await consumer.close()
    _run(main())


def test_async_commit_after_break_commits_what_was_handed_out(served) -> None:
    async def main() -> None:
        consumer = await _async_consumer(served, group_id="aiter-commit", enable_auto_commit=False)
        try:
            async for record in consumer:
                if record.offset == 6:
                    break
            await consumer.commit()
            assert await consumer.committed(EVENTS_0) == OffsetAndMetadata(7, "", record.leader_epoch)
            assert await consumer.position(EVENTS_0) == 7
            assert (await consumer.__anext__()).offset == 7  # fetched again from there
            polled = await consumer.poll(timeout_ms=5_000)  # a poll after the iterator: from 8 on, nothing lost
            assert polled[EVENTS_0][0].offset == 8
        finally:
            await consumer.close(autocommit=False)
    _run(main())
