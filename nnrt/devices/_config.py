"""Restricted devices declared in a TOML file (``nnrt devices --config FILE``).

The same fields as a simulation scenario's ``[devices.NAME]`` limits, plus what a real
``RestrictedDevice`` reports::

    [devices.npu]
    feature_level = 4                          # 1-8
    operations = ["CONV_2D", "ADD"]            # default: every operation at its feature level
    operand_types = ["TENSOR_FLOAT32", "INT32"]
    performance = 0.5                          # time and power relative to the CPU (lower is better)
    type = "accelerator"                       # cpu, gpu, accelerator, other
    fail_prepare = "GENERAL_FAILURE"           # optional: every preparation fails with this status

A mistake is INVALID_ARGUMENT naming the device and the field.
"""

from __future__ import annotations

import os
import tomllib
from typing import Any

from nnrt.devices._device import DeviceType
from nnrt.devices._restricted import RestrictedDevice
from nnrt.errors import InvalidArgumentError
from nnrt.types import ErrorStatus

__all__ = ["devices_from_config"]

_FIELDS = {"feature_level", "operations", "operand_types", "performance", "type", "fail_prepare"}


def devices_from_config(path: str | os.PathLike[str]) -> list[RestrictedDevice]:
    """The devices ``path`` declares, in file order."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise InvalidArgumentError(f"{os.fspath(path)}: {err}") from None
    tables = data.get("devices")
    if not isinstance(tables, dict) or not tables or set(data) - {"devices"}:
        raise InvalidArgumentError(f"{os.fspath(path)}: expected only [devices.NAME] tables")
    return [_device(name, body) for name, body in tables.items()]


def _device(name: str, body: Any) -> RestrictedDevice:
    where = f"devices.{name}"
    if not isinstance(body, dict):
        raise InvalidArgumentError(f"{where}: must be a table")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise InvalidArgumentError(f"{where}.{unknown[0]}: unknown field (known: {', '.join(sorted(_FIELDS))})")
    kwargs = {k: v for k, v in body.items() if k in ("feature_level", "operations", "operand_types", "performance")}
    try:
        if "type" in body:
            kwargs["device_type"] = DeviceType[str(body["type"]).upper()]
        if "fail_prepare" in body:
            kwargs["fail_prepare"] = ErrorStatus[str(body["fail_prepare"]).upper()]
    except KeyError as err:
        raise InvalidArgumentError(f"{where}: {err.args[0]!r} is not a known device type or status") from None
    try:
        return RestrictedDevice(name, **kwargs)
    except InvalidArgumentError as err:
        raise InvalidArgumentError(f"{where}.{err.args[0]}") from None
