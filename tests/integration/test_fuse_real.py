"""The preparation-time fusions on vendored real networks: the fused plan is bit for bit the
unfused one (the same model compiled without ``fuse_steps``), and the fusions do happen
(PaddleOCR's hardswish / affine chains, BlazeFace's residual ADD + RELU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nnrt.execution._plan as plan_module
from nnrt.execution._interpreter import ExecContext, fp_errors_ignored, fp_errors_restored, run_plan
from nnrt.execution._plan import Plan, compile_plan
from nnrt.importers import load

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"

CASES = {
    "rapidocr_ch_PP-OCRv4_det_infer.onnx": ("x", (1, 3, 96, 128)),
    "rapidocr_ch_ppocr_mobile_v2.0_cls_infer.onnx": ("x", (1, 3, 48, 192)),
    "mediapipe_face_detection_short_range.tflite": (None, None),
}


def _outputs(plan: Plan, args: list[np.ndarray]) -> list[np.ndarray]:
    token = fp_errors_ignored()
    gen = run_plan(plan, list(args), ExecContext())
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        return [np.asarray(v) for v in stop.value]
    finally:
        fp_errors_restored(token)


@pytest.mark.parametrize("name", list(CASES))
def test_fused_real_networks_keep_their_bits(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    input_name, shape = CASES[name]
    shapes = {input_name: list(shape)} if input_name else None
    model = load(MODELS / name, input_shapes=shapes)
    fused = compile_plan(model)
    with monkeypatch.context() as m:
        m.setattr(plan_module, "fuse_steps", lambda model, steps, fetcher, operands: steps)
        plain = compile_plan(load(MODELS / name, input_shapes=shapes))
    assert len(fused.steps) < len(plain.steps)
    rng = np.random.default_rng(0)
    dims = [tuple(model.operands[i].dimensions) for i in model.input_indexes]
    args = [(rng.standard_normal(d) * 2).astype(np.float32) for d in dims]
    for got, want in zip(_outputs(fused, args), _outputs(plain, args), strict=True):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    labels = [s.label for s in fused.steps]
    if name.startswith("rapidocr"):  # hardswish chains: ADD 3, RELU6, MUL x, DIV 6 in one step
        assert any("(RELU6) + " in label and "(DIV)" in label for label in labels)
    else:  # BlazeFace: each residual ADD takes its RELU (and writes into its channel PAD's array)
        assert sum("(ADD) + " in label and label.endswith("(RELU)") for label in labels) == 16
