from __future__ import annotations

from epochguard.sim.clock import SeededRandom, VirtualClock
from epochguard.sim.network import LinkFault, Network


def _net(jitter: int = 3) -> Network:
    return Network(VirtualClock(), SeededRandom(1), base_delay_ms=2, jitter_ms=jitter)


def _deliver_all(net: Network, until_ms: int = 1_000) -> list:
    out = []
    while net.clock.now_ms < until_ms:
        net.clock.advance(1)
        out.extend(net.due())
    return out


def test_per_link_order_is_kept_despite_jitter() -> None:
    net = _net(jitter=50)
    for i in range(100):
        net.send("a", "b", i)
    assert [e.payload for e in _deliver_all(net)] == list(range(100))


def test_nothing_arrives_before_its_delay() -> None:
    net = _net(jitter=0)
    net.send("a", "b", "x")
    net.clock.advance(1)
    assert net.due() == []
    net.clock.advance(1)
    assert [e.payload for e in net.due()] == ["x"]


def test_reply_names_the_request() -> None:
    net = _net()
    msg_id = net.send("a", "b", "ping")
    [request] = _deliver_all(net, 50)
    net.reply(request, "pong")
    [response] = _deliver_all(net, 100)
    assert (response.src, response.dst, response.reply_to, response.payload) == ("b", "a", msg_id, "pong")


def test_cut_drops_both_directions_until_it_heals() -> None:
    net = _net()
    net.cut("a", "b", until_ms=100)
    net.send("a", "b", 1)
    net.send("b", "a", 2)
    net.send("a", "c", 3)
    assert [e.payload for e in _deliver_all(net, 99)] == [3]
    net.send("a", "b", 4)  # at 99 ms: still cut
    net.clock.advance(1)
    net.send("a", "b", 5)  # the cut expired at 100 ms
    assert [e.payload for e in _deliver_all(net, 200)] == [5]
    assert net.dropped == 3


def test_partial_drop_rate_is_seeded() -> None:
    def survivors(seed: int) -> list[int]:
        net = Network(VirtualClock(), SeededRandom(seed))
        net.set_fault("a", "b", LinkFault(drop_rate=0.5))
        for i in range(200):
            net.send("a", "b", i)
        return [e.payload for e in _deliver_all(net)]

    assert survivors(3) == survivors(3)
    assert 50 < len(survivors(3)) < 150
    assert survivors(3) != survivors(4)


def test_extra_delay_and_heal_node() -> None:
    net = _net(jitter=0)
    net.set_fault("a", "b", LinkFault(extra_delay_ms=30))
    net.send("a", "b", "slow")
    net.heal_node("b")
    net.send("a", "b", "after heal")  # cannot overtake the slow one on the same link
    arrivals = []
    while net.clock.now_ms < 100:
        net.clock.advance(1)
        arrivals += [(net.clock.now_ms, e.payload) for e in net.due()]
    assert arrivals == [(32, "slow"), (32, "after heal")]


def test_purge_drops_what_the_node_sent() -> None:
    net = _net()
    net.send("a", "b", 1)
    net.send("b", "a", 2)
    assert net.purge("a") == 1
    assert [e.payload for e in _deliver_all(net)] == [2]
