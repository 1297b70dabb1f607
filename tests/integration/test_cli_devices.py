"""``nnrt devices --config FILE --model NAME``: restricted devices declared in a file, listed
with their limits, and how a model would be partitioned across them; mistakes name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnrt.cli import main

CONFIG = """
[devices.npu]
feature_level = 3
operations = ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"]
performance = 0.5
"""


def test_devices_with_a_config_and_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "devices.toml"
    config.write_text(CONFIG)
    assert main(["devices", "--config", str(config), "--model", "mobilenet_block"]) == 0
    out = capsys.readouterr().out
    assert "npu: ACCELERATOR, version 1.0, feature level 3" in out
    assert "  operations: CONV_2D DEPTHWISE_CONV_2D FULLY_CONNECTED" in out
    assert "  every type: exec time x0.50, power x0.50 relative to the CPU" in out
    assert "  npu does not run operation 3 (AVERAGE_POOL_2D): npu does not support AVERAGE_POOL_2D" in out
    assert out.endswith("  step 0 on npu: operations 0, 1, 2\n  step 1 on nnrt-cpu: operations 3, 4\n"
                        "  step 2 on npu: operations 5\n")


@pytest.mark.parametrize(("text", "message"), [
    ("[devices.npu]\nfeature_level = 12\n", "devices.npu.feature_level: must be an int from 1 to 8"),
    ("[devices.npu]\nspeed = 2\n", "devices.npu.speed: unknown field"),
    ('[devices.npu]\noperations = ["CONV_9D"]\n', "devices.npu.operations: 'CONV_9D' is not an OperationType"),
    ('[devices.npu]\ntype = "tpu"\n', "devices.npu: 'TPU' is not a known device type"),
    ("[apps.x]\n", "expected only [devices.NAME] tables"),
    ("[devices.npu\n", "devices.toml: "),
])
def test_config_mistakes_name_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                        message: str) -> None:
    config = tmp_path / "devices.toml"
    config.write_text(text)
    assert main(["devices", "--config", str(config)]) == 2
    assert message in capsys.readouterr().err


def test_unknown_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices", "--model", "no-such-model"]) == 2
    assert capsys.readouterr().err.startswith("nnrt devices: INVALID_ARGUMENT: --model no-such-model: ")


def test_devices_with_a_real_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "devices.toml"
    config.write_text(CONFIG)
    model = Path(__file__).parents[1] / "data" / "models" / "mediapipe_hand_recrop.tflite"
    assert main(["devices", "--config", str(config), "--model", str(model)]) == 0
    out = capsys.readouterr().out
    assert "npu does not run operation" in out and "PRELU" in out
    assert "step 0 on npu: operations 0" in out
