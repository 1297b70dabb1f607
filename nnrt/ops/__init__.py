"""Numpy reference kernels, one module per operation family.

Importing this package registers every kernel (see ``_registry`` for the contract).
``_common`` holds the helpers all families share: quantized values, fused activations,
broadcasting, padding and layouts.
"""

from importlib import import_module

from nnrt.ops._registry import Kernel, OpCall, kernel, prepare_function, registered_operations

__all__ = ["FAMILIES", "Kernel", "OpCall", "kernel", "prepare_function", "registered_operations"]

#: The kernel modules, imported in this order.
FAMILIES = (
    "arithmetic",
    "elementwise",
    "activations",
    "dense",
    "conv",
    "pooling",
    "shape",
    "quantize",
    "reduce",
    "normalization",
    "resize",
    "lookup",
    "recurrent",
    "detection",
    "sparse",
)

for _family in FAMILIES:
    import_module(f"nnrt.ops.{_family}")
