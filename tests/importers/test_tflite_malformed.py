"""Malformed TFLite files: every one is an InvalidArgumentError naming what is wrong, never
another exception or a hang."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import nnrt
from tests.importers.tflite_builder import BO, OPT, S, TflModel, load_bytes, opts


def _good() -> bytes:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 4, 4, 2], name="x")
    y = g.tensor([1, 4, 4, 3], name="y")
    o = opts(S.Conv2DOptionsT, padding=S.Padding.SAME, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1)
    g.op(BO.CONV_2D, [x, g.const(np.ones((3, 1, 1, 2))), g.const(np.zeros(3))], [y], OPT.Conv2DOptions, o)
    g.io([x], [y])
    return m.build()


def test_the_base_file_loads() -> None:
    assert load_bytes(_good()).finished


@pytest.mark.parametrize("cut", [8, 12, 40, 100, -200, -20, -1])
def test_truncated(cut: int) -> None:
    data = _good()
    with pytest.raises(nnrt.InvalidArgumentError, match=r"malformed flatbuffer|outside|past the end"):
        load_bytes(data[:cut])


def test_garbage_with_the_identifier() -> None:
    junk = bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8))
    with pytest.raises(nnrt.InvalidArgumentError, match="malformed flatbuffer"):
        load_bytes(junk[:4] + b"TFL3" + junk[8:])


def test_root_offset_out_of_range() -> None:
    data = bytearray(_good())
    struct.pack_into("<I", data, 0, len(data) + 100)
    with pytest.raises(nnrt.InvalidArgumentError, match="root offset points to byte"):
        load_bytes(bytes(data))


def test_vector_length_past_the_end() -> None:
    """A vector that claims more elements than the file holds."""
    data = bytearray(_good())
    root = struct.unpack_from("<I", data, 0)[0]
    vt = root - struct.unpack_from("<i", data, root)[0]
    buffers_field = struct.unpack_from("<H", data, vt + 4 + 2 * 4)[0]
    vec = root + buffers_field + struct.unpack_from("<I", data, root + buffers_field)[0]
    struct.pack_into("<I", data, vec, 10**8)
    with pytest.raises(nnrt.InvalidArgumentError, match="buffers claims 100000000 elements"):
        load_bytes(bytes(data))


def test_bad_indices() -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([2], name="x")
    g.op(BO.RELU, [x], [7])
    g.io([x], [x])
    with pytest.raises(nnrt.InvalidArgumentError, match=r"outputs \[7\] has an index outside \[0, 1\)"):
        load_bytes(m.build())


def test_constant_of_the_wrong_size() -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([2], name="x")
    c = g.tensor([3], data=np.ones(2, np.float32), name="c")
    y = g.tensor([2], name="y")
    g.op(BO.ADD, [x, c], [y], OPT.AddOptions, opts(S.AddOptionsT))
    g.io([x], [y])
    with pytest.raises(nnrt.InvalidArgumentError, match="has 8 bytes, shape \\[3\\] of FLOAT32 needs 12"):
        load_bytes(m.build())


def test_random_corruption_never_escapes() -> None:
    """Flip bytes all over a valid file: each load succeeds or raises InvalidArgumentError."""
    data = _good()
    rng = np.random.default_rng(5)
    outcomes = {"loaded": 0, "rejected": 0}
    for _ in range(300):
        bad = bytearray(data)
        for pos in rng.integers(8, len(bad), 3):
            bad[pos] = int(rng.integers(0, 256))
        try:
            load_bytes(bytes(bad))
            outcomes["loaded"] += 1
        except nnrt.InvalidArgumentError:
            outcomes["rejected"] += 1
    assert outcomes["rejected"] > 0


def test_a_node_with_too_few_inputs_is_a_listed_rejection() -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 4, 4, 2], name="x")
    y = g.tensor([1, 4, 4, 2], name="y")
    g.op(BO.CONV_2D, [x], [y], OPT.Conv2DOptions, opts(S.Conv2DOptionsT, strideW=1, strideH=1))
    g.io([x], [y])
    with pytest.raises(nnrt.importers.UnsupportedModelError, match=r"malformed CONV_2D node \(1 inputs, 1 outputs\)"):
        load_bytes(m.build())


def test_self_referencing_and_deeply_nested_subgraphs() -> None:
    """WHILE whose body is the main graph's own caller, and a chain of 40 nested IFs: refused."""
    m = TflModel()
    subs = [m.main] + [m.subgraph() for _ in range(40)]
    for k, g in enumerate(subs):
        c, x = g.tensor([1], np.bool_, name=f"c{k}"), g.tensor([2], name=f"x{k}")
        y = g.tensor([2], name=f"y{k}")
        nxt = k + 1 if k + 1 < len(subs) else k  # the last one refers to itself
        g.op(BO.IF, [c, c, x], [y], OPT.IfOptions, opts(S.IfOptionsT, thenSubgraphIndex=nxt, elseSubgraphIndex=nxt))
        g.io([c, x], [y])
    with pytest.raises(nnrt.importers.UnsupportedModelError, match="nested more than 32 deep"):
        load_bytes(m.build())
