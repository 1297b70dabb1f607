"""A driver in its own process: ``ProcessDevice`` runs an ordinary device in a child process
(the service) behind the ``Device`` contract, with death detection, a watchdog and restart.

Layering: this package sits beside the framework, above ``devices`` and ``execution``; the
service side imports the devices it runs, the app side only the contract.
"""

from nnrt.process._device import ProcessDevice

__all__ = ["ProcessDevice"]
