"""The ONNX reader's failure paths: unsupported nodes listed at once, malformed and hostile files."""

from __future__ import annotations

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus
from nnrt.importers._protobuf import MAX_DEPTH
from tests.importers.onnx_build import make_model, save

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _small_model() -> object:
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])


def test_every_unsupported_node_is_listed(tmp_path: object) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("Einsum", ["a", "a"], ["b"], equation="ij,ij->ij", name="first_bad"),
        helper.make_node("Relu", ["b"], ["c"], name="downstream"),  # fed by a rejected node: not listed again
        helper.make_node("NonZero", ["x"], ["d"], name="second_bad"),
        helper.make_node("Resize", ["x", "", "s"], ["e"], mode="cubic", name="third_bad"),
    ]
    s = numpy_helper.from_array(np.asarray([1, 1, 2, 2], np.float32), "s")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("c", "d", "e")]
    path = save(make_model(nodes, [x], outs, [s], opset=13), tmp_path)
    with pytest.raises(nnrt.UnsupportedModelError) as info:
        nnrt.load(path)
    err = info.value
    assert err.status is ErrorStatus.INVALID_ARGUMENT
    assert [(r.node, r.op_type) for r in err.rejections] == [
        ("first_bad", "Einsum"), ("second_bad", "NonZero"), ("third_bad", "Resize")]
    assert "3 onnx node(s)" in str(err) and "cubic" in str(err)


def test_domain_and_old_opset_are_rejected(tmp_path: object) -> None:
    node = helper.make_node("FusedConv", ["x"], ["y"], domain="com.microsoft", name="fused")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    with pytest.raises(nnrt.UnsupportedModelError, match=r"com\.microsoft"):
        nnrt.load(save(make_model([node], [x], [y]), tmp_path, "a.onnx"))
    with pytest.raises(nnrt.UnsupportedModelError, match="opset 9"):
        nnrt.load(save(make_model([helper.make_node("Relu", ["x"], ["y"])], [x], [y], opset=9), tmp_path, "b.onnx"))


def _write(tmp_path: object, data: bytes) -> str:
    path = f"{tmp_path}/bad.onnx"
    with open(path, "wb") as f:
        f.write(data)
    return path


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xff" * 20, "varint"),
        (b"\x3a\x80\x01", "runs past the end"),  # graph (field 7), length 128, no bytes
        (b"\x0b\x00", "wire type 3"),
        (b"\x08\x07", "no graph"),  # ir_version only
        (b"\x3a\x00", "no ir_version"),
        (b"\x00\x01", "field number 0"),
    ],
)
def test_malformed_bytes_are_invalid_argument(tmp_path: object, data: bytes, match: str) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match=match):
        nnrt.load(_write(tmp_path, data))


def test_truncated_model_names_the_problem(tmp_path: object) -> None:
    data = _small_model().SerializeToString()  # type: ignore[attr-defined]
    with pytest.raises(nnrt.InvalidArgumentError, match=r"truncated|runs past|raw_data"):
        nnrt.load(_write(tmp_path, data[: len(data) - 40]))


def test_raw_data_of_the_wrong_size(tmp_path: object) -> None:
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], raw_data=b"\x00" * 12)
    node = helper.make_node("Add", ["x", "w"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    model = make_model([node], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [t])
    with pytest.raises(nnrt.InvalidArgumentError, match="raw_data has 12 bytes"):
        nnrt.load(save(model, tmp_path))


def test_nesting_is_bounded(tmp_path: object) -> None:
    # An If whose branch holds an If whose branch holds ... deeper than the reader follows.
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], [y])
    graph = leaf
    for _ in range(MAX_DEPTH // 3 + 2):  # nest through then_branch only: the file grows linearly
        node = helper.make_node("If", ["c"], ["y"], then_branch=graph, else_branch=leaf)
        graph = helper.make_graph([node], "g", [], [y])
    model = helper.make_model(graph)
    with pytest.raises(nnrt.InvalidArgumentError, match="nested deeper"):
        nnrt.load(save(model, tmp_path))


def test_external_data_outside_the_directory_is_refused(tmp_path: object) -> None:
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    entry = t.external_data.add()
    entry.key, entry.value = "location", "../../etc/passwd"
    node = helper.make_node("Add", ["x", "w"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    model = make_model([node], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [t])
    with pytest.raises(nnrt.InvalidArgumentError, match=r"outside the model.s directory"):
        nnrt.load(save(model, tmp_path))


def test_external_data_beside_the_model_is_read(device: nnrt.CpuDevice, tmp_path: object) -> None:
    w = np.arange(4, dtype=np.float32)
    with open(f"{tmp_path}/weights.bin", "wb") as f:
        f.write(b"\x00" * 8 + w.tobytes())
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    for k, v in (("location", "weights.bin"), ("offset", "8"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    node = helper.make_node("Add", ["x", "w"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    model = make_model([node], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [t])
    m = nnrt.load(save(model, tmp_path))
    out = device.prepare_model_sync(m).execute_sync([np.ones(4, np.float32)]).outputs[0]
    np.testing.assert_array_equal(out, w + 1)


def test_fuzzed_files_fail_cleanly_or_load(tmp_path: object) -> None:
    """Truncations and byte flips of a valid model: INVALID_ARGUMENT or a model, never another error."""
    data = bytearray(_small_model().SerializeToString())  # type: ignore[attr-defined]
    rng = np.random.default_rng(3)
    outcomes = {"invalid": 0, "loaded": 0}
    for k in range(300):
        mutated = bytearray(data)
        if k % 2:
            mutated = mutated[: int(rng.integers(1, len(data)))]
        else:
            for _ in range(int(rng.integers(1, 4))):
                mutated[int(rng.integers(0, len(mutated)))] = int(rng.integers(0, 256))
        try:
            nnrt.load(_write(tmp_path, bytes(mutated)))
            outcomes["loaded"] += 1
        except nnrt.InvalidArgumentError:
            outcomes["invalid"] += 1
    assert outcomes["invalid"] > 100, outcomes


def test_if_branches_of_different_ranks_are_refused(tmp_path: object) -> None:
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    ax = numpy_helper.from_array(np.asarray([0], np.int64), "ax")
    then_g = helper.make_graph([helper.make_node("Unsqueeze", ["x", "ax"], ["y"])], "then", [], [y], initializer=[ax])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "else", [], [y])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="the_if")
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    with pytest.raises(nnrt.UnsupportedModelError, match=r"the_if \(If\): output 0 has rank 3 in then_branch and 2"):
        nnrt.load(save(make_model([node], inputs, [y], opset=13), tmp_path))


@pytest.mark.parametrize("writable", [True, False], ids=["bytearray", "bytes"])
def test_raw_data_is_aligned_and_unchanged(writable: bool) -> None:
    # Protobuf puts raw_data at any byte offset; names of 1..8 characters shift it through every
    # remainder. Large float32 data slides back over its field header (no copy); small data,
    # 8-byte values and read-only buffers are copied when misaligned. Values never change.
    from nnrt.importers._onnx_proto import parse_model, tensor_array

    rng = np.random.default_rng(3)
    arrays = {}
    for k in range(1, 9):
        arrays["w" * k] = rng.standard_normal(40 * k).astype(np.float32)  # 160.. bytes: slid
        arrays["s" * k] = rng.standard_normal(3).astype(np.float32)  # 12 bytes: copied
        arrays["i" * k] = rng.integers(-9, 9, 20 * k).astype(np.int64)  # 8-byte values
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [x],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    data = model.SerializeToString()  # type: ignore[attr-defined]
    buf = memoryview(bytearray(data) if writable else data)
    graph = parse_model(buf).graph
    assert graph is not None
    got = {t.name: tensor_array(t, "initializer") for t in graph.initializers}
    for name, want in arrays.items():
        arr = got[name]
        assert arr.flags.aligned and arr.ctypes.data % arr.dtype.itemsize == 0, name
        assert arr.dtype == want.dtype and not arr.flags.writeable
        np.testing.assert_array_equal(arr, want)
    slid = [got["w" * k] for k in range(1, 9)]
    base = np.frombuffer(buf, np.uint8).ctypes.data
    in_buffer = [base <= a.ctypes.data < base + len(data) for a in slid]
    assert all(in_buffer) if writable else not all(in_buffer)  # bytes: the misaligned ones copied
