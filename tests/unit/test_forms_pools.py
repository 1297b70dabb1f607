"""Request forms whose arguments lie in shared pools (``nnrt.process._forms``), without a service:
written byte for byte as ``encode_execute`` packs the same request in full, read by the service
through a known form as the full parse reads them (the same views of the same pools), never
matched by a corrupted packet; result forms with outputs written in place write and read what
``encode_outputs`` / ``decode_outputs`` do."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnrt
from nnrt.burst import MalformedPacketError
from nnrt.burst._packet import unpack_request
from nnrt.memory import Memory
from nnrt.memory._memory import pool_origin
from nnrt.process._fmq import CONTROL_BYTES, Ring
from nnrt.process._forms import Expect, FormCache, ResultForm, read_result, request_form, write_result
from nnrt.process._transport import (
    ARENA_INPUT_BYTES,
    decode_execute,
    decode_outputs,
    encode_execute,
    encode_outputs,
    output_locations,
)
from nnrt.process._wire import InPlace, PoolRef

_DTYPES = [np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint8), np.dtype(np.float16)]
F32 = np.dtype(np.float32)
#: Per input: dtype, and None (omitted), a small shape (inline) or a row count (a [rows, 1100] view in the pool).
_inputs = st.lists(st.tuples(st.sampled_from(_DTYPES), st.one_of(st.none(), st.lists(st.integers(0, 4), max_size=2).map(tuple),
                                                                 st.integers(4, 6))), min_size=1, max_size=4)
#: Per output: None (by value) or a row count (a [rows, 1024] float32 region written in place).
_outputs = st.lists(st.one_of(st.none(), st.integers(1, 3)), min_size=1, max_size=3)
_times = st.one_of(st.none(), st.integers(0, 10**12).map(lambda ns: ns / 1e9))
_POOL_BYTES = 1 << 17


def _ring(capacity: int = 1 << 16) -> Ring:
    return Ring(memoryview(bytearray(CONTROL_BYTES + capacity)), capacity)


@contextlib.contextmanager
def _request(spec: Any, outs: Any, seed: int) -> Iterator[tuple[Memory, list[Any], list[Any], list[Any], list[Any]]]:
    """A pool, the input values (pool ones are views of it at scattered offsets), their origins,
    the output places and the matching ``PoolRef`` of each output written in place."""
    rng = np.random.default_rng(seed)
    with Memory.from_shared_memory(size=_POOL_BYTES) as mem:
        assert mem.name is not None
        pos = 0
        values: list[Any] = []
        origins: list[Any] = []
        for dtype, dims in spec:
            if type(dims) is int:  # in the pool
                pos += 8 * int(rng.integers(0, 64))
                n = dims * 1100 * dtype.itemsize
                view = mem.buffer[pos : pos + n].view(dtype).reshape(dims, 1100)
                view[...] = rng.integers(0, 100, view.shape).astype(dtype)
                assert view.nbytes >= ARENA_INPUT_BYTES and pool_origin(view) == (mem.name, pos)
                values.append(view)
                origins.append((mem.name, pos))
                pos += n
            else:
                values.append(None if dims is None else rng.integers(0, 100, dims).astype(dtype))
                origins.append(None)
        places: list[Any] = []
        refs: list[Any] = []
        for rows in outs:
            if rows is None:
                places.append(None)
                refs.append(None)
                continue
            pos += 8 * int(rng.integers(0, 64))
            places.append((mem.name, pos, (rows, 1024)))
            refs.append(PoolRef(mem.name, pos, "<f4", (rows, 1024)))
            pos += rows * 4096
        assert pos <= _POOL_BYTES
        yield mem, values, origins, places, refs
        del values


def _attach(mem: Memory) -> Any:
    def attach(name: str, where: str) -> np.ndarray:
        assert name == mem.name, where
        return mem.buffer
    return attach


def _same(got: Any, want: Any) -> bool:
    if got is None or want is None:
        return got is None and want is None
    return bool(got.shape == want.shape and got.dtype == want.dtype and bytes(got.data) == bytes(want.data))


@settings(max_examples=60, deadline=None)
@given(_inputs, _outputs, st.integers(1, 1 << 62), _times, _times)
def test_a_form_with_pools_writes_and_is_read_as_the_full_packing(spec: Any, outs: Any, rid: int, deadline: float | None,
                                                                   loop_timeout: float | None) -> None:
    dtypes = [d for d, _ in spec]
    out_dtypes = [F32] * len(outs)
    with _request(spec, outs, rid % 997) as (mem, values, origins, places, refs):
        form = request_form(77, "app", values, dtypes, out_dtypes, None, origins, places)
        assert form is not None
        packed = encode_execute(rid, 77, "app", values, deadline, loop_timeout, dtypes, len(outs), None, refs)
        assert packed is not None and packed[2] == []  # no arena block: the pool's views travel by name
        ring = _ring()
        assert form.write(ring, rid, values, deadline, loop_timeout)
        pkt = ring.peek()
        assert pkt is not None
        assert bytes(pkt) == b"".join(bytes(p) for p in packed[0])  # byte for byte
        assert form.nbytes < 4096  # the pools' bytes never travel
        req = unpack_request(pkt)
        cache = FormCache()
        assert cache.match(pkt) is None
        known = cache.learn(pkt, req, dtypes, out_dtypes)
        assert known is not None and known.inline == [v is not None and o is None for v, o in zip(values, origins)]
        # a later request of the form: read through it as the full parse reads it
        ring = _ring()
        form.write(ring, rid + 1, values, None, 2.5)
        later = ring.peek()
        assert later is not None
        hit = cache.match(later)
        assert hit is not None and hit[0] is known and hit[1:] == (None, 2.5)
        full = unpack_request(later)
        for got, parsed, want in zip(known.values(later, _attach(mem)),
                                     decode_execute(full, dtypes, len(outs), _attach(mem)), values):
            assert _same(got, want) and _same(parsed, want)
            if got is not None and want.nbytes >= ARENA_INPUT_BYTES:
                assert np.shares_memory(got, mem.buffer)  # in place, not a copy
        views = known.outputs(_attach(mem))
        parsed_outs = output_locations(full, out_dtypes, _attach(mem))
        assert (views is None) == (parsed_outs is None) == all(p is None for p in places)
        for v, p, place in zip(views or [], parsed_outs or [], places):
            assert (v is None) == (p is None) == (place is None)
            if v is not None:
                assert v.shape == p.shape == place[2] and np.shares_memory(v, p) and v.flags.writeable
        del views, parsed_outs, hit, known, full, req


@settings(max_examples=60, deadline=None)
@given(_inputs, _outputs, st.integers(0, 600), st.integers(0, 255), st.integers(0, 64))
def test_a_corrupted_packet_with_pools_never_passes_for_a_known_form(spec: Any, outs: Any, at: int, byte: int,
                                                                    cut: int) -> None:
    dtypes = [d for d, _ in spec]
    out_dtypes = [F32] * len(outs)
    with _request(spec, outs, at) as (mem, values, origins, places, _refs):
        form = request_form(5, "app", values, dtypes, out_dtypes, None, origins, places)
        assert form is not None
        ring = _ring()
        form.write(ring, 1, values, None, None)
        pkt = ring.peek()
        assert pkt is not None
        cache = FormCache()
        cache.learn(pkt, unpack_request(pkt), dtypes, out_dtypes)
        raw = bytearray(pkt)
        if at < len(raw):
            raw[at] = byte
        view = memoryview(bytes(raw[: max(0, len(raw) - cut)]))
        hit = cache.match(view)
        try:
            req = unpack_request(view)
            full = decode_execute(req, dtypes, len(outs), _attach(mem))
            full_outs = output_locations(req, out_dtypes, _attach(mem))
        except (MalformedPacketError, nnrt.InvalidArgumentError, AssertionError):  # (a pool name changed: not ours)
            assert hit is None
            return
        if hit is not None:
            known, dl, to = hit
            assert (known.app, known.handle, dl, to) == (req.app, req.handle, req.deadline, req.loop_timeout)
            for got, want in zip(known.values(view, _attach(mem)), full):
                assert _same(got, want)
            outs_got = known.outputs(_attach(mem))
            assert (outs_got is None) == (full_outs is None)
            for a, b in zip(outs_got or [], full_outs or []):
                assert (a is None and b is None) or (a.shape == b.shape and np.shares_memory(a, b))


@given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 5), max_size=3).map(tuple)), max_size=3),
       st.integers(1, 1 << 62), st.integers(0, 10**9))
def test_a_result_form_with_outputs_in_place_writes_and_reads_what_encode_outputs_packs(
        outs: Any, rid: int, device_ns: int) -> None:
    in_place = [p for p, _ in outs]
    shapes = [s for _, s in outs]
    payload = [InPlace(s) if p else np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) for p, s in outs]
    form = ResultForm(shapes, [F32] * len(outs), in_place)
    assert form.matches(payload)
    assert not form.matches([np.zeros(s, np.float32) if p else InPlace(s) for p, s in outs]) or not outs
    ring = _ring()
    assert write_result(ring, form, rid, payload, device_ns)
    pkt = ring.peek()
    assert pkt is not None
    assert bytes(pkt) == b"".join(bytes(p) for p in encode_outputs(rid, True, (payload, device_ns))[0])
    got = read_result(pkt, Expect([F32] * len(outs), form, in_place=in_place))
    full = decode_outputs(pkt, [F32] * len(outs), in_place)
    assert got[:2] == full[:2] == (rid, True) and got[2][1] == full[2][1] == device_ns
    for a, b, want in zip(got[2][0], full[2][0], payload):
        if type(want) is InPlace:
            assert a == b == want
        else:
            assert np.array_equal(a, want) and np.array_equal(b, want)


def test_an_input_in_a_pool_of_another_size_is_invalid_argument() -> None:
    """The service checks a known form's pool locations at every use (a pool mapped again
    under the name may be smaller): INVALID_ARGUMENT naming the input, as the full parse says."""
    with Memory.from_shared_memory(size=8192) as mem:
        view = mem.buffer[:8192].view(np.float32).reshape(1, 2048)
        assert mem.name is not None
        form = request_form(1, "app", [view], [F32], [F32], None, [(mem.name, 0)], None)
        assert form is not None
        ring = _ring()
        form.write(ring, 1, [view], None, None)
        pkt = ring.peek()
        assert pkt is not None
        cache = FormCache()
        known = cache.learn(pkt, unpack_request(pkt), [F32])
        assert known is not None

        def smaller(name: str, where: str) -> np.ndarray:
            return mem.buffer[:4096]

        with pytest.raises(nnrt.InvalidArgumentError, match=r"input 0's 8192 bytes at 0 .* inside its 4096-byte pool"):
            known.values(pkt, smaller)
        with pytest.raises(nnrt.InvalidArgumentError, match=r"input 0's 8192 bytes at 0 .* inside its 4096-byte pool"):
            decode_execute(unpack_request(pkt), [F32], 1, smaller)
        del view
