"""The model layer: operands, operations, subgraphs, graph validation and rendering."""

from nnrt.model._builder import ModelBuilder, OperandRef, OutputSpec
from nnrt.model._model import Model
from nnrt.model._operand import (
    ChannelQuant,
    Operand,
    Operation,
    SupportsBuffer,
    as_dims,
    as_float,
    as_int,
    as_int_list,
    dims_product,
)

__all__ = [
    "ChannelQuant",
    "Model",
    "ModelBuilder",
    "Operand",
    "OperandRef",
    "Operation",
    "OutputSpec",
    "SupportsBuffer",
    "as_dims",
    "as_float",
    "as_int",
    "as_int_list",
    "dims_product",
]
