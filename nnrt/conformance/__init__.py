"""CTS conformance: Android's NNAPI CTS cases, run through nnrt's public API.

``python -m nnrt.conformance`` prints a table per operation and totals; see ``_cts``.
"""

from nnrt.conformance._cts import CaseResult, build_model, case_inputs, iter_specs, load_spec, run_case

__all__ = ["CaseResult", "build_model", "case_inputs", "iter_specs", "load_spec", "run_case", "run_conformance"]


def __getattr__(name: str) -> object:
    if name == "run_conformance":
        from nnrt.conformance.__main__ import run_conformance

        return run_conformance
    raise AttributeError(name)
