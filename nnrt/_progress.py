"""Progress lines for nnrt's own commands: one line on stderr, redrawn in place.

Progress is for a person watching a terminal, so it is shown only when both standard output
and standard error are terminals (a redirected report stays clean, a log gets no carriage
returns), and it goes to stderr so that it never mixes with the report on stdout. The
library's own code paths never print; the commands pass ``progress_stream()`` down.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress", "progress_stream"]


def progress_stream() -> TextIO | None:
    """``sys.stderr`` when stdout and stderr are both terminals, else None (no progress)."""
    try:
        return sys.stderr if sys.stdout.isatty() and sys.stderr.isatty() else None
    except (AttributeError, ValueError):  # a closed or replaced stream
        return None


class Progress:
    """``label: [#####     ]  42.0%  detail``, redrawn at most five times a second.

    With ``stream=None`` every call is a no-op, so callers need no conditionals.
    """

    def __init__(self, label: str, total: float = 0.0, stream: TextIO | None = None) -> None:
        self.label, self.total, self.stream = label, total, stream
        self._last = 0.0
        self._width = 0

    def update(self, done: float, detail: str = "", *, force: bool = False) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        if self.total > 0:
            frac = min(1.0, done / self.total)
            text = f"{self.label}: [{'#' * int(frac * 30):<30}] {frac * 100:5.1f}%  {detail}"
        else:
            text = f"{self.label}: {detail}"
        self._draw(text)

    def note(self, text: str) -> None:
        """Show ``text`` as the status line at once (replaced by the next update)."""
        if self.stream is not None:
            self._draw(f"{self.label}: {text}")

    def _draw(self, text: str) -> None:
        assert self.stream is not None
        text = text[:119]
        self.stream.write("\r" + text.ljust(self._width))
        self._width = len(text)
        self.stream.flush()

    def close(self) -> None:
        """Erase the line."""
        if self.stream is not None and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
