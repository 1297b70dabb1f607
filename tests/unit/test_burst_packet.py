"""Burst packets without an event loop: the flat form round-trips, and every malformed form
is ``MalformedPacketError`` (GENERAL_FAILURE), never a bare Python error. The binary form a
``ProcessDevice``'s rings carry is also written from templates (``nnrt.process._forms``'s
request and result forms): byte for byte what ``pack_request`` / ``pack_result`` pack, read as
the full parse reads it, and no corrupted packet passes for a known form."""

from __future__ import annotations

import random
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import nnrt
from nnrt import ErrorStatus
from nnrt.burst import Location, MalformedPacketError, RequestPacket, check_request, decode_request, encode_request
from nnrt.burst._packet import unpack_request
from nnrt.process._fmq import CONTROL_BYTES, Ring
from nnrt.process._forms import Expect, FormCache, RequestForm, ResultForm, read_result, request_form, write_result
from nnrt.process._transport import decode_execute, decode_outputs, encode_execute, encode_outputs

locations = st.builds(
    Location,
    slot=st.integers(0, 50),
    offset=st.integers(0, 1 << 20),
    length=st.integers(0, 1 << 20),
    dimensions=st.one_of(st.none(), st.lists(st.integers(0, 64), max_size=5).map(tuple)),
)
packets = st.builds(
    RequestPacket,
    inputs=st.lists(st.one_of(st.none(), locations), max_size=4).map(tuple),
    outputs=st.lists(locations, max_size=3).map(tuple),
    measure_timing=st.booleans(),
    deadline=st.one_of(st.none(), st.integers(0, 10**6).map(lambda ns: ns / 1e9)),
    loop_timeout=st.one_of(st.none(), st.integers(0, 10**6).map(lambda ns: ns / 1e9)),
)


def sample() -> RequestPacket:
    return RequestPacket(
        (Location(0, 0, 16, (1, 4)), None, Location(1, 16, 16, (1, 4))), (Location(2, 0, 16, (1, 4)),), True, 5.0, 0.5
    )


@given(packets)
def test_flat_form_round_trips(packet: RequestPacket) -> None:
    datums = encode_request(packet)
    assert datums[0] == len(datums)
    assert decode_request(datums) == packet
    assert decode_request(list(datums)) == packet


def test_flat_layout_matches_the_documented_header() -> None:
    datums = encode_request(sample())
    assert datums[:6] == (len(datums), 3, 1, 1, 5_000_000_000, 500_000_000)
    assert datums[6:13] == (1, 0, 0, 16, 2, 1, 4)
    assert datums[13:18] == (0, 0, 0, 0, 0)  # the omitted input


def test_no_dimensions_and_rank_0_are_distinct_in_the_flat_form() -> None:
    # n_dims -1: no dimensions given (as the model says); 0: rank 0, as a 0-d array's shape.
    packet = RequestPacket((Location(0, 0, 4), Location(0, 4, 4, ())), (Location(1, 0, 4),))
    datums = encode_request(packet)
    assert datums[6:11] == (1, 0, 0, 4, -1)
    assert datums[11:16] == (1, 0, 4, 4, 0)
    decoded = decode_request(datums)
    assert decoded == packet
    assert decoded.inputs[0].dimensions is None and decoded.inputs[1].dimensions == ()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda d: d[:-1], id="truncated"),
        pytest.param(lambda d: [*d, 0], id="trailing datum"),
        pytest.param(lambda d: [d[0] - 1, *d[1:-1]], id="dropped field, size adjusted"),
        pytest.param(lambda d: [d[0], d[1] + 1, *d[2:]], id="one input too many"),
        pytest.param(lambda d: [d[0], d[1], d[2] + 5, *d[3:]], id="bad output count"),
        pytest.param(lambda d: [d[0], -1, *d[2:]], id="negative count"),
        pytest.param(lambda d: [*d[:3], 2, *d[4:]], id="measure not 0 or 1"),
        pytest.param(lambda d: [*d[:4], -7, *d[5:]], id="negative deadline"),
        pytest.param(lambda d: [*d[:6], 3, *d[7:]], id="has_value not 0 or 1"),
        pytest.param(lambda d: [*d[:10], 99, *d[11:]], id="n_dims past the end"),
        pytest.param(lambda d: [*d[:10], -2, *d[11:]], id="n_dims below -1"),
        pytest.param(lambda d: [*d[:-7], 0, *d[-6:]], id="output without a value"),
        pytest.param(lambda d: [float(x) for x in d], id="floats"),
        pytest.param(lambda d: [], id="empty"),
        pytest.param(lambda d: "packet", id="not a sequence"),
    ],
)
def test_malformed_flat_packets_are_general_failure(mutate: object) -> None:
    datums = list(encode_request(sample()))
    with pytest.raises(MalformedPacketError) as info:
        decode_request(mutate(datums))  # type: ignore[operator]
    assert info.value.status is ErrorStatus.GENERAL_FAILURE


def test_random_datum_corruption_never_raises_anything_else() -> None:
    rng = random.Random(6)
    base = list(encode_request(sample()))
    for _ in range(3000):
        datums = list(base)
        for _ in range(rng.randint(1, 3)):
            kind = rng.random()
            pos = rng.randrange(len(datums)) if datums else 0
            if kind < 0.3 and datums:
                del datums[pos]
            elif kind < 0.6:
                datums.insert(pos, rng.choice([-(2**31), -1, 0, 1, 7, 2**31, 10**12]))
            elif datums:
                datums[pos] = rng.choice([-1, 0, 1, 2, 16, 99, 2**40])
        try:
            packet = decode_request(datums)
        except MalformedPacketError:
            continue
        assert check_request(packet) is packet


@pytest.mark.parametrize(
    "packet",
    [
        pytest.param("not a packet", id="wrong type"),
        pytest.param(RequestPacket([Location(0, 0, 4)], ()), id="inputs a list"),  # type: ignore[arg-type]
        pytest.param(RequestPacket((Location(0.0, 0, 4),), ()), id="float slot"),  # type: ignore[arg-type]
        pytest.param(RequestPacket((Location(True, 0, 4),), ()), id="bool slot"),
        pytest.param(RequestPacket((Location(0, 0, 4, [1, 1]),), ()), id="dims a list"),  # type: ignore[arg-type]
        pytest.param(RequestPacket((Location(0, 0, 4, (-1,)),), ()), id="negative dim"),
        pytest.param(RequestPacket((), (None,)), id="output None"),  # type: ignore[arg-type]
        pytest.param(RequestPacket((), (), measure_timing=1), id="measure an int"),  # type: ignore[arg-type]
        pytest.param(RequestPacket((), (), deadline="soon"), id="deadline a string"),  # type: ignore[arg-type]
        pytest.param(RequestPacket(((0, 0, 4),), ()), id="location a tuple"),  # type: ignore[arg-type]
    ],
)
def test_malformed_packet_objects(packet: object) -> None:
    with pytest.raises(MalformedPacketError, match=r"."):
        check_request(packet)


def test_out_of_range_values_are_left_to_the_server() -> None:
    # Negative slots and offsets are well-formed: the server answers INVALID_ARGUMENT for them.
    packet = RequestPacket((Location(-3, -8, 4),), (Location(10**9, 0, 4),))
    assert check_request(packet) is packet


# -- binary form (the rings of a ProcessDevice) -------------------------------------------------


def _joined(parts: list[object]) -> memoryview:
    return memoryview(b"".join(bytes(p) for p in parts))  # type: ignore[call-overload]


def test_binary_request_round_trips() -> None:
    from nnrt.burst._packet import INLINE_SLOT, pack_request, request_datums, unpack_request

    ins = [(INLINE_SLOT, 0, 16, (1, 4)), None, (0, 64, 8, (2,))]
    datums = request_datums(ins, [(INLINE_SLOT, 0, 0, None)], True, 12.5, 0.25)
    parts, n = pack_request(7, 99, "app-é", datums, ["psm_x"], [bytes(range(16))], 16)
    buf = _joined(parts)
    assert len(buf) == n
    req = unpack_request(buf)
    assert (req.rid, req.handle, req.app, req.pools) == (7, 99, "app-é", ("psm_x",))
    assert req.inputs == ins and req.outputs == [(INLINE_SLOT, 0, 0, None)]
    assert (req.measure_timing, req.deadline, req.loop_timeout) == (True, 12.5, 0.25)
    assert bytes(req.data) == bytes(range(16))


def test_binary_result_round_trips() -> None:
    from nnrt.burst._packet import pack_result, result_datums, unpack_result

    parts, n = pack_result(5, result_datums(ErrorStatus.NONE, [(2, 3), ()], 10, 20), "", [bytes(32)], 32)
    assert len(_joined(parts)) == n
    rid, status, shapes, on, message, data = unpack_result(_joined(parts))
    assert (rid, status, shapes, on, message, len(data)) == (5, ErrorStatus.NONE, [((2, 3), True), ((), True)], 10, "", 32)
    parts, _ = pack_result(6, result_datums(ErrorStatus.INVALID_ARGUMENT, [], None, None), "bad input 0", [], 0)
    rid, status, shapes, on, message, _ = unpack_result(_joined(parts))
    assert (rid, status, shapes, on, message) == (6, ErrorStatus.INVALID_ARGUMENT, [], None, "bad input 0")


def test_a_result_with_dimensions_numpy_cannot_shape_is_a_failure() -> None:
    """A service's result packet claiming an empty output of dimensions (0, 2^40, 2^40) (no
    array has them) ends the call with GENERAL_FAILURE, not numpy's ValueError."""
    from nnrt.burst._packet import pack_result, result_datums
    from nnrt.process._transport import decode_outputs

    parts, _ = pack_result(5, result_datums(ErrorStatus.NONE, [(0, 1 << 40, 1 << 40)], 10, 20), "", [], 0)
    rid, ok, err = decode_outputs(memoryview(_joined(parts)), [np.dtype(np.float32)])
    assert (rid, ok) == (5, False) and err.status is ErrorStatus.GENERAL_FAILURE
    parts, _ = pack_result(6, result_datums(ErrorStatus.NONE, [(0, 4)], 10, 20), "", [], 0)
    rid, ok, (outputs, _) = decode_outputs(memoryview(_joined(parts)), [np.dtype(np.float32)])
    assert ok and outputs[0].shape == (0, 4)


@given(st.binary(max_size=300), st.integers(0, 400))
def test_binary_packets_that_do_not_parse_are_malformed(noise: bytes, cut: int) -> None:
    from nnrt.burst._packet import INLINE_SLOT, pack_request, packet_id, request_datums, unpack_request, unpack_result

    datums = request_datums([(INLINE_SLOT, 0, 16, (1, 4))], [(INLINE_SLOT, 0, 0, None)], False, None, None)
    parts, _ = pack_request(3, 4, "a", datums, [], [bytes(16)], 16)
    good = b"".join(bytes(p) for p in parts)
    for raw in (noise, good[:cut] + noise, good[:cut]):
        for parse in (unpack_request, unpack_result):
            try:
                parse(memoryview(raw))
            except MalformedPacketError as err:
                assert err.status is ErrorStatus.GENERAL_FAILURE
        assert isinstance(packet_id(memoryview(raw)), int)


# -- the same binary forms built from a template (``nnrt.process._forms``) ---------------------------

_DTYPES = [np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint8), np.dtype(np.float16)]
_shapes = st.lists(st.integers(0, 5), max_size=3).map(tuple)
_signatures = st.lists(st.tuples(st.sampled_from(_DTYPES), st.one_of(st.none(), _shapes)), min_size=1, max_size=4)
_times = st.one_of(st.none(), st.integers(0, 10**12).map(lambda ns: ns / 1e9))


def _ring(capacity: int = 1 << 14) -> Ring:
    return Ring(memoryview(bytearray(CONTROL_BYTES + capacity)), capacity)


def _values(signature: list[tuple[np.dtype[Any], tuple[int, ...] | None]], seed: int) -> list[Any]:
    rng = np.random.default_rng(seed)
    return [None if dims is None else rng.integers(0, 100, dims).astype(dtype) for dtype, dims in signature]


@given(_signatures, st.integers(0, 1 << 62), st.integers(1, 1 << 62), _times, _times, st.integers(0, 3))
def test_a_request_form_writes_what_pack_request_packs(signature: Any, handle: int, rid: int, deadline: float | None,
                                                       loop_timeout: float | None, n_out: int) -> None:
    dtypes = [d for d, _ in signature]
    values = _values(signature, rid)
    form = request_form(handle, "app-é", values, dtypes, [np.dtype(np.float32)] * n_out, None)
    assert form is not None
    packed = encode_execute(rid, handle, "app-é", values, deadline, loop_timeout, dtypes, n_out, None)
    assert packed is not None
    ring = _ring()
    assert form.write(ring, rid, values, deadline, loop_timeout)
    pkt = ring.peek()
    assert pkt is not None
    assert bytes(pkt) == b"".join(bytes(p) for p in packed[0])  # byte for byte (a fresh ring pads with zeros)
    req = unpack_request(pkt)
    assert (req.rid, req.handle, req.app, req.deadline, req.loop_timeout) == (rid, handle, "app-é", deadline, loop_timeout)
    for got, want in zip(decode_execute(req, dtypes, n_out, _no_pools), values):
        assert (got is None and want is None) or np.array_equal(got, want)


def _no_pools(name: str, where: str) -> np.ndarray:
    raise AssertionError("no pools in these packets")


def _learnt(signature: Any, seed: int) -> tuple[FormCache, RequestForm, list[np.dtype[Any]]]:
    dtypes = [d for d, _ in signature]
    form = request_form(77, "app", _values(signature, seed), dtypes, [np.dtype(np.float32)], None)
    assert form is not None
    ring = _ring()
    form.write(ring, 1, _values(signature, seed), None, None)
    pkt = ring.peek()
    assert pkt is not None
    cache = FormCache()
    assert cache.match(pkt) is None  # not learnt yet: the full parse
    cache.learn(pkt, unpack_request(pkt), dtypes)
    return cache, form, dtypes


@given(_signatures, st.integers(0, 1000), _times, _times)
def test_the_service_reads_a_known_form_as_the_full_parse_does(signature: Any, seed: int, deadline: float | None,
                                                              loop_timeout: float | None) -> None:
    cache, form, dtypes = _learnt(signature, seed)
    values = _values(signature, seed + 1)
    ring = _ring()
    form.write(ring, 99, values, deadline, loop_timeout)
    pkt = ring.peek()
    assert pkt is not None
    hit = cache.match(pkt)
    assert hit is not None and cache.hits == 1
    known, dl, to = hit
    req = unpack_request(pkt)
    assert (known.app, known.handle, dl, to) == (req.app, req.handle, req.deadline, req.loop_timeout)
    for got, full, want in zip(known.values(pkt, _no_pools), decode_execute(req, dtypes, 1, _no_pools), values):
        assert (got is None and full is None and want is None) or (np.array_equal(got, want) and np.array_equal(full, want))
    cache.forget("app", 77)
    assert cache.match(pkt) is None and len(cache) == 0


@given(_signatures, st.integers(0, 1000), st.integers(0, 400), st.integers(0, 255), st.integers(0, 64))
# An empty input whose corrupted dimensions numpy cannot shape ((0, 0, 0) -> a dimension of 2^40):
# once a bare ValueError from ``reshape``, now INVALID_ARGUMENT.
@example(signature=[(np.dtype("float32"), (0, 0, 0))], seed=0, at=143, byte=32, cut=0)
def test_a_corrupted_packet_never_passes_for_a_known_form(signature: Any, seed: int, at: int, byte: int, cut: int) -> None:
    """Whatever a packet's bytes, a form matches only packets the full parse reads the same way
    (and every packet the full parse refuses falls through to it)."""
    cache, form, dtypes = _learnt(signature, seed)
    ring = _ring()
    form.write(ring, 5, _values(signature, seed), None, None)
    pkt = ring.peek()
    assert pkt is not None
    raw = bytearray(pkt)
    if at < len(raw):
        raw[at] = byte
    raw = raw[: max(0, len(raw) - cut)]
    view = memoryview(bytes(raw))
    hit = cache.match(view)
    try:
        req = unpack_request(view)
        full = decode_execute(req, dtypes, 1, _no_pools)
    except (MalformedPacketError, nnrt.InvalidArgumentError):
        assert hit is None
        return
    if hit is not None:
        known, dl, to = hit
        assert (known.app, known.handle, dl, to) == (req.app, req.handle, req.deadline, req.loop_timeout)
        for got, want in zip(known.values(view, _no_pools), full):
            assert (got is None and want is None) or (got.shape == want.shape and bytes(got.data) == bytes(want.data))


@given(st.lists(st.tuples(st.sampled_from(_DTYPES), _shapes), max_size=3), st.integers(1, 1 << 62), st.integers(0, 10**9))
def test_a_result_form_writes_and_reads_what_pack_result_packs(outs: Any, rid: int, device_ns: int) -> None:
    dtypes = [d for d, _ in outs]
    arrays = _values([(d, s) for d, s in outs], rid % 1000)
    form = ResultForm([s for _, s in outs], dtypes)
    assert form.matches(arrays)
    ring = _ring()
    assert write_result(ring, form, rid, arrays, device_ns)
    pkt = ring.peek()
    assert pkt is not None
    assert bytes(pkt) == b"".join(bytes(p) for p in encode_outputs(rid, True, (arrays, device_ns))[0])
    got = read_result(pkt, Expect(dtypes, form))
    full = decode_outputs(pkt, dtypes)
    assert got[:2] == full[:2] == (rid, True) and got[2][1] == full[2][1] == device_ns
    for a, b, want in zip(got[2][0], full[2][0], arrays):
        assert np.array_equal(a, want) and np.array_equal(b, want) and a.dtype == want.dtype
    # another packet (a failure, other shapes, a bad timing) is not of the form: the full parse reads it
    parts, _ = encode_outputs(rid, False, (int(ErrorStatus.INVALID_ARGUMENT), "no"))
    failure = memoryview(b"".join(bytes(p) for p in parts))
    assert form.read(failure, None) is None
    assert read_result(failure, Expect(dtypes, form))[1] is False
    bad = bytearray(pkt)
    struct.pack_into("<q", bad, form.data_end - 16, -7)  # time on device < 0
    assert form.read(memoryview(bytes(bad)), None) is None
    with pytest.raises(MalformedPacketError):
        decode_outputs(memoryview(bytes(bad)), dtypes)


def test_a_result_form_fills_the_callers_buffers() -> None:
    form = ResultForm([(1, 4)], [np.dtype(np.float32)])
    out = np.arange(4, dtype=np.float32).reshape(1, 4)
    ring = _ring()
    assert write_result(ring, form, 3, [out], 10)
    pkt = ring.peek()
    assert pkt is not None
    buf = np.zeros((1, 4), np.float32)
    wrong = np.zeros((4,), np.float32)  # another shape: a new array (the execution path copies it)
    (outs, on), (outs2, _) = form.read(pkt, [buf]), form.read(pkt, [wrong])  # type: ignore[misc]
    assert outs[0] is buf and np.array_equal(buf, out) and on == 10
    assert outs2[0] is not wrong and not wrong.any()


def test_a_ring_reserves_in_place_and_publishes_on_commit() -> None:
    ring = _ring(256)
    pos = ring.begin_write(20)
    assert pos >= 0
    ring.data[pos : pos + 20] = bytes(range(20))
    assert ring.peek() is None  # reserved, not published
    ring.commit_write()
    pkt = ring.peek()
    assert pkt is not None and bytes(pkt) == bytes(range(20)) and ring.is_last()
    assert ring.begin_write(ring.max_packet + 1) == -1  # too large: never


def test_results_of_outputs_written_in_place_carry_shapes_only() -> None:
    from nnrt.process._wire import InPlace, error_payload

    out = np.arange(6, dtype=np.float32).reshape(2, 3)
    parts, n = encode_outputs(9, True, ([InPlace((4, 1024)), out], 50))
    assert n == len(_joined(parts)) and n < 4 * 1024  # the in-place output's bytes do not travel
    rid, ok, (outs, on) = decode_outputs(_joined(parts), [np.dtype(np.float32)] * 2, [True, False])
    assert (rid, ok, on) == (9, True, 50) and outs[0] == InPlace((4, 1024)) and np.array_equal(outs[1], out)
    # OUTPUT_INSUFFICIENT_SIZE comes back with the shapes needed, as over the socket
    err = nnrt.OutputInsufficientSizeError("too small", output_shapes=[nnrt.OutputShape((2, 1024), False)])
    parts, _ = encode_outputs(10, False, error_payload(err))
    rid, ok, back = decode_outputs(_joined(parts), [np.dtype(np.float32)])
    assert (rid, ok) == (10, False) and type(back) is nnrt.OutputInsufficientSizeError
    assert back.output_shapes == (nnrt.OutputShape((2, 1024), False),)


def test_deadlines_too_far_for_int64_nanoseconds_are_never() -> None:
    from nnrt.burst._packet import parse_request, request_datums, seconds_to_ns

    assert seconds_to_ns(None) == seconds_to_ns(float("inf")) == seconds_to_ns(1e12) == -1
    assert seconds_to_ns(1.5) == 1_500_000_000
    for far in (float("inf"), 1e12, 9.3e9):
        datums = request_datums([None], [(0, 0, 4, None)], False, far, far)
        assert parse_request(datums)[3:] == (None, None)
