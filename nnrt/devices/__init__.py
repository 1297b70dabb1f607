"""Devices: the ``Device`` contract and the reference ``CpuDevice``."""

from __future__ import annotations

import threading

from nnrt.devices._cpu import CpuDevice
from nnrt.devices._device import Device, DeviceType

__all__ = ["CpuDevice", "Device", "DeviceType", "get_devices"]

_devices: list[Device] = []
_lock = threading.Lock()


def get_devices() -> list[Device]:
    """The devices available to this process (the reference CPU device, created on first use)."""
    with _lock:
        if not _devices:
            _devices.append(CpuDevice())
        return list(_devices)
