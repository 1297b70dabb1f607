"""The framework layer: device selection, partitioning one model across devices, CPU fallback.

It sits above the devices, as NNAPI's runtime sits above its drivers (``DESIGN.md``): it asks
each device which operations it supports, picks the best device for each operation from the
capabilities they report (``_partition``), prepares one step model per device step, falling
back to the CPU for a step whose device fails (``_prepare``), and runs a partitioned model as
one more driver behind the one execution path (``_driver``). Nothing below imports it.
"""

from nnrt.framework._driver import PartitionedDriver, partitioned_model
from nnrt.framework._partition import PlannedStep, choose_devices, form_steps, partition
from nnrt.framework._prepare import prepare

__all__ = ["PartitionedDriver", "PlannedStep", "choose_devices", "form_steps", "partition", "partitioned_model", "prepare"]
