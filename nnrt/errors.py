"""The error tree. Every failure nnrt reports is an ``NnrtError`` carrying an ``ErrorStatus``.

One subclass per status, so apps can either catch by class (``except nnrt.MissedDeadlineError``)
or branch on ``err.status``. ``error_for(status, message)`` builds the right class from a code,
which is how policy code (that returns statuses) and the async layer (that raises) meet.
``InternalError`` is nnrt's own bug (an illegal state transition): it carries GENERAL_FAILURE.
"""

from __future__ import annotations

from collections.abc import Sequence

from nnrt.types import ErrorStatus, OutputShape

__all__ = [
    "DeadObjectError",
    "DeviceUnavailableError",
    "GeneralFailureError",
    "InternalError",
    "InvalidArgumentError",
    "MissedDeadlineError",
    "NnrtError",
    "OutputInsufficientSizeError",
    "ResourceExhaustedError",
    "error_for",
]


class NnrtError(Exception):
    """Base of every nnrt failure. ``status`` is the NNAPI ``ErrorStatus``.

    ``output_shapes`` is set where NNAPI returns shapes with the failure
    (OUTPUT_INSUFFICIENT_SIZE); it is an empty tuple otherwise.
    """

    default_status = ErrorStatus.GENERAL_FAILURE

    def __init__(
        self,
        message: str,
        *,
        status: ErrorStatus | None = None,
        output_shapes: Sequence[OutputShape] = (),
    ) -> None:
        super().__init__(message)
        self.status: ErrorStatus = self.default_status if status is None else status
        self.output_shapes: tuple[OutputShape, ...] = tuple(output_shapes)

    @property
    def message(self) -> str:
        """The message alone; ``str(err)`` prefixes the status name. Pass this, not ``str(err)``,
        where the status travels separately (a fence's status and message), or it shows twice."""
        return str(self.args[0])

    @property
    def transient(self) -> bool:
        """True where NNAPI says a retry may help."""
        return self.status in (
            ErrorStatus.MISSED_DEADLINE_TRANSIENT,
            ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
            ErrorStatus.DEVICE_UNAVAILABLE,
        )

    def __str__(self) -> str:
        return f"{self.status.name}: {self.args[0]}"

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.message, self.status, self.output_shapes))


def _rebuild(cls: type[NnrtError], message: str, status: ErrorStatus, shapes: tuple[OutputShape, ...]) -> NnrtError:
    return cls(message, status=status, output_shapes=shapes)


class DeviceUnavailableError(NnrtError):
    default_status = ErrorStatus.DEVICE_UNAVAILABLE


class GeneralFailureError(NnrtError):
    default_status = ErrorStatus.GENERAL_FAILURE


class InternalError(GeneralFailureError):
    """A bug in nnrt itself (an illegal transition or broken invariant)."""


class OutputInsufficientSizeError(NnrtError):
    default_status = ErrorStatus.OUTPUT_INSUFFICIENT_SIZE


class InvalidArgumentError(NnrtError):
    default_status = ErrorStatus.INVALID_ARGUMENT


class MissedDeadlineError(NnrtError):
    """MISSED_DEADLINE_TRANSIENT (default) or MISSED_DEADLINE_PERSISTENT."""

    default_status = ErrorStatus.MISSED_DEADLINE_TRANSIENT


class ResourceExhaustedError(NnrtError):
    """RESOURCE_EXHAUSTED_TRANSIENT (default) or RESOURCE_EXHAUSTED_PERSISTENT."""

    default_status = ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT


class DeadObjectError(NnrtError):
    default_status = ErrorStatus.DEAD_OBJECT


_CLASSES: dict[ErrorStatus, type[NnrtError]] = {
    ErrorStatus.DEVICE_UNAVAILABLE: DeviceUnavailableError,
    ErrorStatus.GENERAL_FAILURE: GeneralFailureError,
    ErrorStatus.OUTPUT_INSUFFICIENT_SIZE: OutputInsufficientSizeError,
    ErrorStatus.INVALID_ARGUMENT: InvalidArgumentError,
    ErrorStatus.MISSED_DEADLINE_TRANSIENT: MissedDeadlineError,
    ErrorStatus.MISSED_DEADLINE_PERSISTENT: MissedDeadlineError,
    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT: ResourceExhaustedError,
    ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT: ResourceExhaustedError,
    ErrorStatus.DEAD_OBJECT: DeadObjectError,
}


def error_for(status: ErrorStatus, message: str, *, output_shapes: Sequence[OutputShape] = ()) -> NnrtError:
    """The exception instance for a failing ``status`` (NONE is not a failure)."""
    if status is ErrorStatus.NONE:
        raise InternalError("error_for(NONE): a success is not an error")
    return _CLASSES[status](message, status=status, output_shapes=output_shapes)
