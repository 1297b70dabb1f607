"""Real ONNX models vendored under ``tests/data/models/`` (from public PyPI wheels) against onnxruntime.

Each is loaded with ``nnrt.load`` and run on seeded inputs; every output must match onnxruntime
(one thread) within atol 1e-4 + rtol 1e-3, the issue's bound for float models.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nnrt
from tests.importers.onnx_build import run_nnrt

pytest.importorskip("onnxruntime")

MODELS = Path(__file__).resolve().parent.parent / "data" / "models"

#: file -> (input shapes, feeds maker): the inputs each model runs with (see the models' README).
CASES = {
    "rapidocr_ch_ppocr_mobile_v2.0_cls_infer.onnx": {"x": [1, 3, 48, 192]},
    "rapidocr_ch_PP-OCRv4_det_infer.onnx": {"x": [1, 3, 160, 160]},
    "silero_vad_16k_op15.onnx": {"input": [1, 512], "state": [2, 1, 128], "sr": []},
    "silero_vad_op18_ifless.onnx": {"input": [1, 512], "state": [2, 1, 128], "sr": []},
}


def _feeds(shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    out = {}
    for name, dims in shapes.items():
        out[name] = np.asarray(16000, np.int64) if name == "sr" else rng.uniform(-1, 1, dims).astype(np.float32)
    return out


@pytest.mark.parametrize("file", sorted(CASES))
def test_real_model_matches_onnxruntime(device: nnrt.CpuDevice, file: str) -> None:
    import onnxruntime as ort

    path = MODELS / file
    if not path.exists():
        pytest.skip(f"{file} is not vendored in this checkout")
    shapes = CASES[file]
    feeds = _feeds(shapes)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    fixed = {k: v for k, v in shapes.items() if v}
    got = run_nnrt(device, str(path), [feeds[i.name] for i in sess.get_inputs()], input_shapes=fixed)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g.reshape(w.shape), w, atol=1e-4, rtol=1e-3, err_msg=f"{file} output {k}")


def test_silero_streams_its_state(device: nnrt.CpuDevice) -> None:
    """The recurrent VAD carries its LSTM state from step to step exactly as onnxruntime does."""
    import onnxruntime as ort

    path = MODELS / "silero_vad_16k_op15.onnx"
    if not path.exists():
        pytest.skip("silero_vad_16k_op15.onnx is not vendored in this checkout")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    prepared = device.prepare_model_sync(nnrt.load(path, input_shapes={"input": [1, 512], "state": [2, 1, 128]}))
    rng = np.random.default_rng(5)
    state_ort = state_nnrt = np.zeros((2, 1, 128), np.float32)
    sr = np.asarray(16000, np.int64)
    for _ in range(4):
        chunk = rng.uniform(-0.5, 0.5, (1, 512)).astype(np.float32)
        p_ort, state_ort = sess.run(None, {"input": chunk, "state": state_ort, "sr": sr})
        p_nnrt, state_nnrt = prepared.execute_sync([chunk, state_nnrt, sr.astype(np.int32)]).outputs
        np.testing.assert_allclose(p_nnrt.reshape(p_ort.shape), p_ort, atol=1e-4, rtol=1e-3)
        np.testing.assert_allclose(state_nnrt, state_ort, atol=1e-4, rtol=1e-3)
