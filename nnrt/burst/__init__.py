"""Bursts: streams of executions of one prepared model over bounded channels, with a memory
slot cache (NNAPI's burst, digest section 4).

``Burst`` is the client object made by ``PreparedModel.burst()``; ``Location``,
``RequestPacket`` and ``ResultPacket`` are the packets the channels carry; ``BurstServer`` is
the device-side task; ``_slots.py`` is the client half of the slot cache and packs requests;
``_lane.py`` holds the validated requests the server caches and the lean
runner that executes them at once when nothing is queued. See ``_burst.py`` for the rules
(slots, ordering, running at once, polling, closing).
"""

from nnrt.burst._burst import DEFAULT_MAX_IN_FLIGHT, DEFAULT_POLLING_WINDOW_S, Burst, BurstStatistics
from nnrt.burst._channel import Channel, ChannelClosed, ChannelFull
from nnrt.burst._packet import (
    Location,
    MalformedPacketError,
    RequestPacket,
    ResultPacket,
    check_request,
    decode_request,
    encode_request,
)
from nnrt.burst._server import BurstServer
from nnrt.execution import set_burst_factory

set_burst_factory(Burst)  # ``PreparedModel.burst`` makes these (the execution layer below never imports this one)

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_POLLING_WINDOW_S",
    "Burst",
    "BurstServer",
    "BurstStatistics",
    "Channel",
    "ChannelClosed",
    "ChannelFull",
    "Location",
    "MalformedPacketError",
    "RequestPacket",
    "ResultPacket",
    "check_request",
    "decode_request",
    "encode_request",
]
