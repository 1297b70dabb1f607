"""The QoS scenario simulator: nnrt's real scheduler and execution path, in virtual time.

Describe devices, apps, models, priorities, arrival processes and deadlines in a TOML file
(``nnrt.sim._scenario`` documents the schema), then ``simulate(load_scenario(path))``: every
execution goes through a real ``PreparedModel``, the device's real ``Scheduler`` and
``Policy``, and the real interpreter, on an event loop whose clock is virtual
(``nnrt.sim._loop``), with each step taking its modelled time (``nnrt.sim._device``). The
same scenario and seed give the same report, byte for byte; an hour of traffic takes
seconds. ``nnrt simulate`` is the command line; ``--policy`` compares nnrt's scheduler with
FIFO, priority and EDF baselines (``nnrt.sim._baselines``). ``simulate(..., real=True)`` runs
the same scenario on the real clock (``nnrt.sim._real``), and ``overheads=True`` adds a
model of this host measured beside the scenario's neighbours (``nnrt.sim._overhead``), or
``overheads="scenario"`` one calibrated on a short real run of the scenario itself
(``nnrt.sim._calibrate``), for comparing the two (``benchmarks/fidelity.py``).
"""

from nnrt.sim._baselines import POLICIES, make_policy
from nnrt.sim._builtin import BUILTIN_SCENARIO, builtin_scenario, builtin_scenario_text
from nnrt.sim._engine import RunData, SimulationResult, simulate
from nnrt.sim._loop import LoopClock, SimulationError, VirtualTimeLoop
from nnrt.sim._report import ClassReport, DeviceReport, Report, RunStats, comparison_table, report_table, to_csv, to_json
from nnrt.sim._scenario import Scenario, ScenarioError, load_scenario, parse_scenario

__all__ = [
    "BUILTIN_SCENARIO",
    "POLICIES",
    "ClassReport",
    "DeviceReport",
    "LoopClock",
    "Report",
    "RunData",
    "RunStats",
    "Scenario",
    "ScenarioError",
    "SimulationError",
    "SimulationResult",
    "VirtualTimeLoop",
    "builtin_scenario",
    "builtin_scenario_text",
    "comparison_table",
    "load_scenario",
    "make_policy",
    "parse_scenario",
    "report_table",
    "simulate",
    "to_csv",
    "to_json",
]
