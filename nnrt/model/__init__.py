"""The model layer: operands, operations, subgraphs, graph validation and rendering."""

from nnrt.model._model import Model
from nnrt.model._operand import ChannelQuant, Operand, Operation, SupportsBuffer, dims_product

__all__ = ["ChannelQuant", "Model", "Operand", "Operation", "SupportsBuffer", "dims_product"]
