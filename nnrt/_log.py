"""Library logging: structlog loggers under ``nnrt.*``, never configured by nnrt.

``NNRT_VLOG`` takes NNAPI's ``debug.nn.vlog`` tags, separated by spaces, commas or colons:
``model compilation execution driver cpuexe manager``, or ``1``/``all`` for every tag. A tag
turns on the debug events of its area; without it, those events are not even built, so the
hot path pays one boolean test.
"""

from __future__ import annotations

import os
import re
from typing import Any

import structlog

__all__ = ["TAGS", "get_logger", "vlog_enabled", "reload_vlog"]

TAGS = ("model", "compilation", "execution", "driver", "cpuexe", "manager")
_enabled: frozenset[str] = frozenset()


def reload_vlog(value: str | None = None) -> frozenset[str]:
    """Re-read ``NNRT_VLOG`` (or use ``value``) and return the enabled tags."""
    global _enabled
    raw = os.environ.get("NNRT_VLOG", "") if value is None else value
    words = {w for w in re.split(r"[\s,:]+", raw.strip().lower()) if w}
    _enabled = frozenset(TAGS) if words & {"1", "all"} else frozenset(words & set(TAGS))
    return _enabled


def vlog_enabled(tag: str) -> bool:
    return tag in _enabled


def get_logger(area: str) -> Any:
    """The structlog logger ``nnrt.<area>``."""
    return structlog.get_logger(f"nnrt.{area}")


reload_vlog()
