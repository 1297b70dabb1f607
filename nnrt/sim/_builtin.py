"""The built-in scenario ``nnrt simulate`` runs without a file: camera vs assistant vs background.

Three apps share one two-unit device: a camera app at HIGH runs the small CNN on every frame
(30 Hz, jittered) with a 33 ms deadline; an assistant app at MEDIUM runs the MLP on Poisson
requests with a 100 ms deadline; a background app at LOW keeps the device saturated with
MobileNet-style blocks (two closed-loop clients, no deadline). Step costs are measured on
this machine once (see ``nnrt.sim._models``).
"""

from __future__ import annotations

from nnrt.sim._scenario import Scenario, parse_scenario

__all__ = ["BUILTIN_SCENARIO", "builtin_scenario", "builtin_scenario_text"]

BUILTIN_SCENARIO = """\
name = "camera vs assistant vs background"
duration_s = 60.0

[devices.cpu]
compute_units = 2

[apps.camera]
weight = 2.0

[apps.assistant]
weight = 1.0

[apps.background]
weight = 1.0

[[workloads]]
app = "camera"
model = "small_cnn"
priority = "high"
deadline_ms = 33.0
arrival = "periodic"
period_ms = 33.333
jitter_ms = 2.0

[[workloads]]
app = "assistant"
model = "mlp"
priority = "medium"
deadline_ms = 100.0
arrival = "poisson"
rate_hz = 20.0

[[workloads]]
app = "background"
model = "mobilenet_block"
priority = "low"
arrival = "closed"
clients = 2
"""


def builtin_scenario_text(duration_s: float | None = None) -> str:
    """The built-in scenario's TOML (optionally with another duration)."""
    if duration_s is None:
        return BUILTIN_SCENARIO
    head = "duration_s = 60.0"
    if head not in BUILTIN_SCENARIO:  # pragma: no cover - the constant above changed
        raise AssertionError("the built-in scenario's duration line moved")
    return BUILTIN_SCENARIO.replace(head, f"duration_s = {float(duration_s)!r}", 1)


def builtin_scenario(duration_s: float | None = None) -> Scenario:
    """The built-in scenario (optionally with another duration)."""
    return parse_scenario(builtin_scenario_text(duration_s), source="<built-in>")
