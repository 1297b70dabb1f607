"""``nnrt.prepare``: compile a model for a set of devices, partitioning it when it pays.

NNAPI's compilation (``reference/partitioning.md`` sections 2, 6, 7, 10-12), over nnrt's
devices:

* ``devices=None`` means every device of ``get_devices()``, the reference CPU included: it
  runs whatever no other device supports, and is where a step goes when its device fails to
  prepare it. An explicit list is used as given: without a reference CPU in it, an operation
  no listed device supports is INVALID_ARGUMENT naming it, and a failing preparation fails
  the call (NNAPI's ``createForDevices``: no fallback).
* One device, or every operation choosing the same device: exactly that device's
  ``prepare_model`` (if that device fails and the CPU may stand in, the CPU prepares the
  whole model).
* Otherwise each step's model (``Model.operations_as_model``) is prepared on its device with
  the compilation's preference, priority, app and deadline; a device that fails (any status
  but MISSED_DEADLINE_*, which is returned as NNAPI does) has the step prepared on the CPU.
  With the CPU in the list, a step that fails on its device at execution runs again on the
  CPU (``nnrt.framework._driver``).
  ``cache_dir`` and ``token`` reach every step that runs on a device with compilation
  caching, with a token derived per step (NNAPI rehashes the token with the step's
  operations).
* The result is a ``PreparedModel`` (``nnrt.framework._driver``) with the whole execution
  API, and ``partitions`` describing the steps.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

from nnrt._log import get_logger, vlog_enabled
from nnrt.cache import check_cache_args
from nnrt.clock import check_deadline
from nnrt.devices import CpuDevice, Device, get_devices
from nnrt.devices._device import check_preparation_args
from nnrt.errors import InvalidArgumentError, NnrtError
from nnrt.execution import PreparedModel
from nnrt.framework._driver import device_name, partitioned_model
from nnrt.framework._partition import PlannedStep, choose_devices, form_steps, is_reference
from nnrt.model import Model
from nnrt.types import ErrorStatus, ExecutionPreference, Partition, Priority

__all__ = ["prepare"]

_log = get_logger("compilation")
_NO_FALLBACK = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)


def _check_devices(devices: Sequence[Device] | None) -> list[Device]:
    if devices is None:
        return get_devices()
    if isinstance(devices, Device):
        devices = [devices]
    try:
        found = list(devices)
    except TypeError:
        raise InvalidArgumentError(f"prepare: devices must be a sequence of Device (or None), got {devices!r}") from None
    if not found:
        raise InvalidArgumentError("prepare: devices is empty (None means every device)")
    names: set[str] = set()
    for d in found:
        if not isinstance(d, Device):
            raise InvalidArgumentError(f"prepare: {d!r} in devices is not a Device")
        if d.name in names:
            raise InvalidArgumentError(f"prepare: device {d.name!r} is listed twice")
        names.add(d.name)
    clocks = {id(getattr(d, "clock", None)) for d in found}
    if len(clocks) > 1:
        raise InvalidArgumentError(
            "prepare: the devices do not share one clock, so one deadline cannot cover an execution across them: "
            + ", ".join(d.name for d in found)
        )
    return found


async def prepare(
    model: Model,
    devices: Sequence[Device] | None = None,
    *,
    preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
    priority: Priority = Priority.MEDIUM,
    app: str = "default",
    deadline: float | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    token: bytes | None = None,
) -> PreparedModel:
    """Prepare ``model`` on the best of ``devices`` for each operation (see the module doc)."""
    pref, prio = check_preparation_args(model, preference, priority)
    if deadline is not None:
        deadline = check_deadline(deadline, "prepare")
    if not isinstance(app, str):
        raise InvalidArgumentError(f"prepare: app must be a string, got {app!r}")
    found = _check_devices(devices)
    if cache_dir is not None or token is not None:
        check_cache_args(cache_dir, token)
    ref = next((d for d in found if is_reference(d)), None)
    options = _Options(pref, prio, app, deadline, cache_dir, token)
    if len(found) == 1:
        return await options.on(found[0], model, token)
    for device in found:  # a device whose calls need a service started starts it here, off the loop
        await device.ready()
    choice = choose_devices(model, found, pref)
    if len(set(choice)) <= 1:
        device = found[choice[0]] if choice else (ref or found[0])
        prepared, failed = await options.with_fallback(device, ref, model, token)
        if failed:
            prepared._partitions = (Partition(device_name(prepared), tuple(range(len(model.operations))), failed),)
        return prepared
    planned = form_steps(model, choice, found)
    return await _prepare_steps(model, planned, ref, options)


class _Options:
    """What every step's preparation gets from the call."""

    def __init__(self, pref: ExecutionPreference, prio: Priority, app: str, deadline: float | None,
                 cache_dir: str | os.PathLike[str] | None, token: bytes | None) -> None:
        self.pref, self.prio, self.app, self.deadline, self.cache_dir = pref, prio, app, deadline, cache_dir
        self.token = token

    async def on(self, device: Device, model: Model, token: bytes | None) -> PreparedModel:
        if (self.cache_dir is not None or token is not None) and isinstance(device, CpuDevice):
            return await device.prepare_model(model, preference=self.pref, priority=self.prio, deadline=self.deadline,
                                              app=self.app, cache_dir=self.cache_dir, token=token)
        return await device.prepare_model(model, preference=self.pref, priority=self.prio, deadline=self.deadline,
                                          app=self.app)

    async def with_fallback(self, device: Device, ref: Device | None, model: Model,
                            token: bytes | None) -> tuple[PreparedModel, str]:
        """``model`` prepared on ``device``, else on the reference CPU ``ref`` when allowed;
        and the name of the device that failed ("" if none did)."""
        try:
            return await self.on(device, model, token), ""
        except NnrtError as err:
            if ref is None or ref is device or err.status in _NO_FALLBACK:
                raise
            _log.warning("compilation.fallback", device=device.name, model=model.name, to=ref.name,
                         status=err.status.name, error=str(err))
        return await self.on(ref, model, token), device.name


def _step_token(token: bytes | None, step: PlannedStep) -> bytes | None:
    if token is None:
        return None
    digest = hashlib.sha256(bytes(token))
    digest.update(b"".join(n.to_bytes(4, "little") for n in step.operations))
    return digest.digest()


async def _prepare_steps(model: Model, planned: list[PlannedStep], ref: Device | None, options: _Options) -> PreparedModel:
    steps = []
    for k, step in enumerate(planned):
        step_model = model.operations_as_model(step.operations, step.outputs, inputs=step.inputs,
                                               name=f"{model.name or 'model'}#step{k}")
        pm, failed = await options.with_fallback(step.device, ref, step_model, _step_token(options.token, step))
        steps.append((pm, step, failed))
    fallback = ref if isinstance(ref, CpuDevice) else None
    result = partitioned_model(model, steps, fallback=fallback, preference=options.pref, priority=options.prio,
                               app=options.app)
    if vlog_enabled("compilation"):
        _log.debug("compilation.partitioned", model=model.name,
                   steps=[(p.device, len(p.operations)) for p in result.partitions])
    return result
