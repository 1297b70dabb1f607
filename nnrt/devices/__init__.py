"""Devices: the ``Device`` contract, the reference ``CpuDevice`` and ``RestrictedDevice`` (a
CPU device standing for a vendor driver with a feature level and limits).

``get_devices()`` lists the devices of this process, as NNAPI's device discovery does: the
reference CPU device first, then every device added with ``register_device`` (a stand-in for
a driver found on the phone), in the order added.
"""

from __future__ import annotations

import threading

from nnrt.devices._config import devices_from_config
from nnrt.devices._cpu import CpuDevice
from nnrt.devices._device import Device, DeviceType, OperationSupport, Restrictions, feature_level_reason
from nnrt.devices._restricted import RestrictedDevice, capabilities_from
from nnrt.errors import InvalidArgumentError

__all__ = [
    "CpuDevice",
    "Device",
    "DeviceType",
    "OperationSupport",
    "RestrictedDevice",
    "Restrictions",
    "capabilities_from",
    "devices_from_config",
    "feature_level_reason",
    "get_devices",
    "register_device",
    "unregister_device",
]

_devices: list[Device] = []
_lock = threading.Lock()


def get_devices() -> list[Device]:
    """The devices available to this process: the reference CPU device (created on first use),
    then the registered ones."""
    with _lock:
        if not _devices:
            _devices.append(CpuDevice())
        return list(_devices)


def register_device(device: Device) -> None:
    """Make ``device`` one of ``get_devices()`` (and so a candidate for ``nnrt.prepare``). A
    second device of the same name is INVALID_ARGUMENT."""
    if not isinstance(device, Device):
        raise InvalidArgumentError(f"register_device: {device!r} is not a Device")
    get_devices()
    with _lock:
        if any(d.name == device.name for d in _devices):
            raise InvalidArgumentError(f"register_device: a device named {device.name!r} is already registered")
        _devices.append(device)


def unregister_device(device: Device) -> None:
    """Remove a device added with ``register_device`` (the reference CPU device stays)."""
    with _lock:
        if device in _devices[1:]:
            _devices.remove(device)
