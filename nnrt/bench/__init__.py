"""``nnrt bench``: benchmark a real model the way Android's MLTS does.

Loads a ``.tflite``/``.onnx`` file (``nnrt.load``) or an nnrt model file, runs it on the CPU
device with ``execute``, ``execute_fenced`` and a burst, prints latency percentiles, compares
outputs and latency with the reference runtime (LiteRT, ONNX Runtime) on the same seeded
inputs, profiles per step and per op type (``--profile``), and runs models in watched child
processes (``--crash-test``: SUCCESS / FAILURE / HANG / CRASH).

Modules: ``_inputs`` (opening the file, seeded inputs), ``_reference`` (the reference
runtimes), ``_stats`` (latency and accuracy figures), ``_profile`` (per-step timer over the
compiled plan), ``_run`` (the benchmark), ``_report`` (text and progress bar), ``_crash``
(crash test), ``_cli`` (the command).
"""

from nnrt.bench._cli import main
from nnrt.bench._crash import OUTCOMES, CrashResult, crash_test
from nnrt.bench._inputs import InputSpec, LoadedModel, input_specs, make_inputs, open_model
from nnrt.bench._profile import OpTypeTime, Profile, StepTime, profile_plan
from nnrt.bench._reference import ReferenceUnavailable, open_reference
from nnrt.bench._report import format_report
from nnrt.bench._run import MODES, BenchOptions, BenchReport, run_bench
from nnrt.bench._stats import Accuracy, Latency, compare, summarize

__all__ = [
    "MODES", "OUTCOMES", "Accuracy", "BenchOptions", "BenchReport", "CrashResult", "InputSpec", "Latency", "LoadedModel",
    "OpTypeTime", "Profile", "ReferenceUnavailable", "StepTime", "compare", "crash_test", "format_report", "input_specs",
    "main", "make_inputs", "open_model", "open_reference", "profile_plan", "run_bench", "summarize",
]
