"""How ``nnrt bench`` shows its results: the text report, and a progress bar on long runs.

The text is for people (aligned tables, ratios); ``--json`` writes ``BenchReport.as_dict()``
for tools. The progress bar appears only when the stream is a terminal and a phase has run
for half a second, redraws at most ten times a second, and erases itself when the phase ends,
so short runs and redirected output stay clean.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from nnrt.bench._run import BenchReport
from nnrt.bench._stats import ATOL, MAX_UNITS, RTOL, Accuracy

__all__ = ["TerminalProgress", "format_report"]


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def _ops_line(op_types: dict[str, int], limit: int = 8) -> str:
    ranked = sorted(op_types.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{k} {v}" for k, v in ranked[:limit])
    return shown + (f", ... ({len(ranked) - limit} more types)" if len(ranked) > limit else "")


def _verdict(a: Accuracy) -> str:
    if a.problem:
        return f"NO: {a.problem}"
    if a.quant_units is not None:
        return f"{'yes' if a.ok else 'NO'} ({a.quant_units} quantized unit(s))"
    return f"{'yes' if a.ok else 'NO'} (tolerance used {a.tolerance_used:.3g})"


def format_report(r: BenchReport, *, top: int = 10) -> str:
    lines = [f"nnrt bench: {r.model} ({r.format}, {_mb(r.size)}, {r.operations} operations: {_ops_line(r.op_types)})",
             f"  loaded in {r.load_ms:.1f} ms, prepared in {r.prepare_ms:.1f} ms"
             + (f" (then {r.compile_wait_ms / 1e3:.1f} s for the compiled kernels: numba's cache was cold)"
                if r.compile_wait_ms else "")]
    for s in r.inputs:
        q = f" scale {s.scale:g} zero point {s.zero_point}" if s.type.is_quantized else ""
        lines.append(f"  input {s.name}: {s.type.name} {list(s.shape)}{q}")
    if r.modes:
        runs = next(iter(r.modes.values())).runs
        lines.append(f"latency, ms ({runs} runs per mode after warm-up):")
        lines.append(f"  {'mode':<28}{'p50':>10}{'p90':>10}{'p99':>10}{'mean':>10}{'min':>10}{'cpu p50':>10}")
        rows = list(r.modes.items())
        if r.reference_latency is not None and r.reference:
            rows.append((f"reference ({r.reference})", r.reference_latency))
        for name, lat in rows:
            lines.append(f"  {name:<28}{lat.p50:>10.3f}{lat.p90:>10.3f}{lat.p99:>10.3f}{lat.mean:>10.3f}{lat.min:>10.3f}"
                         f"{lat.cpu_p50:>10.3f}")
        if r.ratio is not None:
            cpu = f", CPU time {r.cpu_ratio:.2f}x" if r.cpu_ratio is not None else ""
            lines.append(f"  ratio nnrt execute / reference (p50): {r.ratio:.2f}x{cpu}")
        if r.disagreeing_modes:
            lines.append(f"  WARNING: outputs of {', '.join(r.disagreeing_modes)} differ from the first execution's")
        else:
            lines.append(f"  outputs identical in every mode ({', '.join(r.modes)})")
    if r.reference is None:
        lines.append(f"reference: none ({r.reference_note})")
    elif r.accuracy:
        lines.append(f"accuracy vs {r.reference} (float: |err| <= {ATOL:g} + {RTOL:g}|ref|; quantized: <= {MAX_UNITS} units):")
        width = max(12, *(len(a.output) + 2 for a in r.accuracy))
        lines.append(f"  {'output':<{width}}{'shape':<18}{'max abs':>11}{'max rel':>11}  within tolerance")
        for a in r.accuracy:
            lines.append(f"  {a.output:<{width}}{list(a.shape)!s:<18}{a.max_abs:>11.3g}{a.max_rel:>11.3g}  {_verdict(a)}")
        if r.stream:
            lines.append(f"  over a stream of {r.stream_steps} steps, state carried from step to step (worst step per output):")
            for a in r.stream:
                lines.append(f"  {a.output:<{width}}{list(a.shape)!s:<18}{a.max_abs:>11.3g}{a.max_rel:>11.3g}  {_verdict(a)}")
            if not r.stream_varied:
                lines.append("  (the reference's outputs did not change along the stream: this comparison cannot see the state)")
        if r.reference_spread:
            lines.append("  noise floor: the reference's plainer path (LiteRT: reference kernels; ONNX Runtime: no graph "
                         "optimizations) against its default one:")
            for a in r.reference_spread:
                lines.append(f"  {a.output:<{width}}{list(a.shape)!s:<18}{a.max_abs:>11.3g}{a.max_rel:>11.3g}  {_verdict(a)}")
    if r.profile is not None:
        p = r.profile
        lines.append(f"profile ({p.runs} runs on this thread, no scheduler; medians): kernels {p.kernels_ms:.3f} ms + "
                     f"interpreter {p.interpreter_ms:.3f} ms per execution (median run as measured: {p.total_ms:.3f} ms)")
        lines.append(f"  {'op type':<30}{'ms':>10}{'share':>9}{'steps':>7}")
        for t in p.op_types:
            lines.append(f"  {t.op_type:<30}{t.ms:>10.3f}{t.share:>8.1%}{t.steps:>7}")
        lines.append(f"  slowest steps (of {len(p.steps)}):")
        for step in p.steps[:top]:
            share = step.ms / p.kernels_ms if p.kernels_ms else 0.0
            lines.append(f"  {step.label:<40}{step.ms:>10.3f}{share:>8.1%}")
    return "\n".join(lines)


class TerminalProgress:
    """``nnrt bench``'s progress bar (a ``Tick`` factory); draws only on a terminal."""

    def __init__(self, stream: TextIO, *, delay_s: float = 0.5, width: int = 30) -> None:
        self._stream = stream
        self._on = bool(getattr(stream, "isatty", lambda: False)())
        self._delay = delay_s
        self._width = width

    def __call__(self, label: str, total: int) -> Callable[[], None]:
        if not self._on or total <= 0:
            return lambda: None
        start = time.monotonic()
        state = {"done": 0, "drawn": 0.0, "visible": False}

        def tick() -> None:
            state["done"] += 1
            now = time.monotonic()
            finished = state["done"] >= total
            if finished:
                if state["visible"]:
                    self._stream.write("\r" + " " * (self._width + 40) + "\r")
                    self._stream.flush()
                return
            if now - start < self._delay or now - state["drawn"] < 0.1:
                return
            filled = int(self._width * state["done"] / total)
            self._stream.write(f"\r  {label:<8} [{'#' * filled}{'.' * (self._width - filled)}] {int(state['done'])}/{total}")
            self._stream.flush()
            state["drawn"], state["visible"] = now, True

        return tick
