"""The shared-memory rings of ``nnrt.process._fmq``: packets in order across wrap-around,
a full ring refusing a packet (nothing written) until the consumer frees room, packets larger
than the ring refused, a lost framing detected, the sleeping handshake, the producer's polling
word, and a channel's memory and descriptors gone after close. (The polling policy:
``test_poll.py``.)"""

from __future__ import annotations

import os

import pytest

from nnrt.process._fmq import Channel, Ring


def drain(ring: Ring) -> list[bytes]:
    out = []
    while (pkt := ring.peek()) is not None:
        out.append(bytes(pkt))
        ring.advance()
    return out


def test_packets_arrive_in_order_across_wrap_around() -> None:
    with Channel.create(256) as ch:
        ring = ch.requests
        sent: list[bytes] = []
        got: list[bytes] = []
        for k in range(300):
            pkt = bytes([k % 251]) * (1 + (k * 37) % 100)
            if not ring.try_write([pkt[:3], pkt[3:]], len(pkt)):
                got += drain(ring)
                assert ring.try_write([pkt], len(pkt))
            sent.append(pkt)
            if k % 7 == 0:
                got += drain(ring)
        got += drain(ring)
        assert got == sent
        assert not ring.readable()


def test_a_full_ring_refuses_until_the_consumer_frees_room() -> None:
    with Channel.create(256) as ch:
        ring = ch.results
        n = 0
        while ring.try_write([b"x" * 40], 40):
            n += 1
        assert n == 256 // 48
        assert not ring.try_write([b"y" * 9], 9)  # 16 bytes left; nothing was written by the refusals
        first = ring.peek()
        assert first is not None and bytes(first) == b"x" * 40
        ring.advance()
        assert ring.try_write([b"z" * 40], 40)
        assert drain(ring) == [b"x" * 40] * (n - 1) + [b"z" * 40]


def test_a_packet_larger_than_half_the_ring_is_refused() -> None:
    with Channel.create(256) as ch:
        assert ch.requests.max_packet == 120
        assert not ch.requests.try_write([b"a" * 121], 121)
        assert ch.requests.try_write([b"a" * 120], 120)
        assert drain(ch.requests) == [b"a" * 120]


def test_a_lost_framing_is_detected_and_reset() -> None:
    with Channel.create(256) as ch:
        ring = ch.requests
        assert ring.try_write([b"abcd"], 4)
        ring._words[0] = 10_000  # a corrupt length prefix
        with pytest.raises(ValueError, match="runs past"):
            ring.peek()
        ring.reset()
        assert ring.peek() is None
        assert ring.try_write([b"ok"], 2)
        assert drain(ring) == [b"ok"]


def test_sleeping_handshake_and_doorbell() -> None:
    with Channel.create(256) as ch:
        ring, bell = ch.requests, ch.request_bell
        assert ring.set_sleeping(True) is False  # nothing there: may sleep
        assert ring.try_write([b"p"], 1)
        bell.ring(ring)  # the consumer sleeps: rung
        assert bell.wait(5.0)
        bell.clear()
        assert not bell.wait(0)
        ring.set_sleeping(False)
        assert ring.try_write([b"q"], 1)
        bell.ring(ring)  # awake: not rung
        assert not bell.wait(0)
        assert ring.set_sleeping(True) is True  # a packet arrived before sleeping: do not sleep
        assert ring.poll(0.0)
        assert drain(ring) == [b"p", b"q"]
        assert not ring.poll(0.0001)


def test_close_releases_memory_and_descriptors() -> None:
    before = set(os.listdir("/proc/self/fd"))
    ch = Channel.create(4096)
    fds = ch.fds()
    assert all(str(fd) in os.listdir("/proc/self/fd") for fd in fds)
    ch.close()
    ch.close()  # twice is fine
    assert set(os.listdir("/proc/self/fd")) <= before
    with open("/proc/self/maps") as maps:
        assert "nnrt-fmq" not in maps.read()


def test_capacity_must_be_a_power_of_two() -> None:
    with pytest.raises(ValueError, match="power of two"):
        Channel.create(1000)


def test_the_producer_says_whether_it_polls_for_answers() -> None:
    with Channel.create(256) as ch:
        ring = ch.requests
        assert not ring.producer_polling
        ring.set_producer_polling(True)
        assert ring.producer_polling
        assert ring.try_write([b"x" * 40], 40) and drain(ring) == [b"x" * 40]  # a word of its own
        assert ring.producer_polling and not ch.results.producer_polling
        ring.set_producer_polling(False)
        assert not ring.producer_polling
    ring.set_producer_polling(True)  # closed: ignored
    assert not ring.producer_polling


def test_the_consumer_counts_the_packets_queued_behind_the_one_it_reads() -> None:
    with Channel.create(1024) as ch:
        ring = ch.requests
        for k in range(5):
            assert ring.try_write([bytes([k]) * 40], 40)
        seen = []
        while ring.peek() is not None:
            seen.append(ring.packets_after())
            ring.advance()
        assert seen == [4, 3, 2, 1, 0]
        # across the wrap-around (a skip marker) the count stays the packets written after it
        for k in range(30):
            assert ring.try_write([bytes([k]) * 40], 40)
            assert ring.try_write([bytes([k]) * 40], 40)
            assert ring.peek() is not None and ring.packets_after() == 1
            ring.advance()
            assert ring.peek() is not None and ring.packets_after() == 0
            ring.advance()
