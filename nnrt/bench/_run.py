"""The benchmark itself (MLTS-style): load, prepare, run in every mode, compare with the reference.

``run_bench`` opens the model, makes seeded inputs, prepares it on a fresh ``CpuDevice`` (BLAS on
one thread, as the references run), and times ``runs`` executions (after ``warmup``) in each
mode: ``await prepared.execute``, ``execute_fenced`` followed by ``await fence``, and
``burst.execute`` in one burst. With the
reference runtime installed it runs the reference on the same inputs: its first run (fresh
state, for streaming models) is compared with nnrt's first execution, and in ``execute`` mode
its runs are interleaved one for one with nnrt's, so drift in the shared machine's load
touches both alike; the ratio is of the medians. Every mode's last outputs are checked equal
to the first execution's (the modes share one execution path and must agree bit for bit).
``--profile`` adds ``profile_plan``'s per-step and per-op-type times, ``--stream`` a comparison
over a stream with the state carried (``_stream``), ``--reference-spread`` the reference's own
noise floor.

State inputs an importer made explicit start at their initial values; other inputs the
reference does not have start at zero (the zero point of a quantized input), as a stream does.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnrt.bench._inputs import InputSpec, input_specs, make_inputs, open_model, with_initial_state
from nnrt.bench._profile import Profile, profile_plan
from nnrt.bench._reference import Reference, ReferenceUnavailable, feeds_for, open_reference, pair_outputs
from nnrt.bench._stats import Accuracy, Latency, compare, summarize
from nnrt.bench._stream import run_stream
from nnrt.devices import CpuDevice
from nnrt.execution import PreparedModel
from nnrt.importers import state_variables
from nnrt.model import Model

__all__ = ["MODES", "BenchOptions", "BenchReport", "Tick", "run_bench"]

MODES = ("execute", "fenced", "burst")

#: Made by the caller per phase (label, total steps); called once per step.
Tick = Callable[[str, int], Callable[[], None]]


def _no_progress(_label: str, _total: int) -> Callable[[], None]:
    return lambda: None


@dataclass
class BenchOptions:
    runs: int = 50
    warmup: int = 5
    seed: int = 0
    input_shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    input_values: Mapping[str, float] = field(default_factory=dict)
    #: Inputs fixed when the file is loaded (``nnrt.load(input_values=...)``); the reference is fed them.
    load_values: Mapping[str, float] = field(default_factory=dict)
    modes: Sequence[str] = MODES
    reference: bool = True
    #: Also run the reference's plainer path and report how far it is from the default one.
    reference_spread: bool = False
    #: Also compare a stream of this many steps, state carried (models with explicit state).
    stream_steps: int = 0
    profile: bool = False
    loop_timeout: float | None = None
    progress: Tick = _no_progress


@dataclass
class BenchReport:
    model: str
    format: str
    size: int
    #: Operations in the model and in the models its IF/WHILE operations run (``op_types`` by type).
    operations: int
    op_types: dict[str, int]
    load_ms: float
    prepare_ms: float
    inputs: list[InputSpec]
    output_names: list[str]
    modes: dict[str, Latency] = field(default_factory=dict)
    #: Modes whose outputs differ from the first execution's.
    disagreeing_modes: list[str] = field(default_factory=list)
    reference: str | None = None
    reference_note: str = ""
    reference_latency: Latency | None = None
    accuracy: list[Accuracy] = field(default_factory=list)
    #: The reference's plainer path against its default one, per output (the noise floor).
    reference_spread: list[Accuracy] = field(default_factory=list)
    #: The worst comparison per output over a stream of ``stream_steps`` steps (``--stream``).
    stream: list[Accuracy] = field(default_factory=list)
    stream_steps: int = 0
    #: Whether the reference's outputs changed along the stream (if not, it could not see the state).
    stream_varied: bool = False
    profile: Profile | None = None
    #: How long the bench waited after preparing for the compiled kernels (numba's cache was
    #: cold: the preparation gave a provisional plan, ``nnrt.devices._tier``); 0 when it did not.
    compile_wait_ms: float = 0.0

    @property
    def ratio(self) -> float | None:
        """nnrt's ``execute`` median over the reference's."""
        ex = self.modes.get("execute")
        if ex is None or self.reference_latency is None or not self.reference_latency.p50 > 0:
            return None
        return ex.p50 / self.reference_latency.p50

    @property
    def cpu_ratio(self) -> float | None:
        """nnrt's ``execute`` median CPU time over the reference's: what other processes' load
        does not distort (it lengthens the longer runs more often)."""
        ex = self.modes.get("execute")
        if ex is None or self.reference_latency is None or not self.reference_latency.cpu_p50 > 0:
            return None
        return ex.cpu_p50 / self.reference_latency.cpu_p50

    @property
    def accurate(self) -> bool | None:
        return all(a.ok for a in (*self.accuracy, *self.stream)) if self.accuracy else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "format": self.format, "size_bytes": self.size, "operations": self.operations,
            "op_types": self.op_types, "load_ms": self.load_ms, "prepare_ms": self.prepare_ms,
            "compile_wait_ms": self.compile_wait_ms,
            "inputs": [{"name": s.name, "type": s.type.name, "shape": list(s.shape)} for s in self.inputs],
            "outputs": self.output_names,
            "modes": {k: v.as_dict() for k, v in self.modes.items()},
            "modes_agree": not self.disagreeing_modes, "disagreeing_modes": self.disagreeing_modes,
            "reference": None if self.reference is None else {
                "runtime": self.reference,
                "latency": self.reference_latency.as_dict() if self.reference_latency else None,
                "ratio": self.ratio,
                "cpu_ratio": self.cpu_ratio,
                "accuracy": [a.as_dict() for a in self.accuracy],
                "accurate": self.accurate,
                "spread": [a.as_dict() for a in self.reference_spread],
                "stream_steps": self.stream_steps,
                "stream": [a.as_dict() for a in self.stream],
                "stream_varied": self.stream_varied,
            },
            "reference_note": self.reference_note,
            "profile": self.profile.as_dict() if self.profile else None,
        }


def _count_ops(model: Model, counts: Counter[str] | None = None) -> Counter[str]:
    """Operation types in ``model`` and in the models its IF/WHILE operations reference."""
    counts = Counter() if counts is None else counts
    seen: set[int] = set()

    def walk(m: Model) -> None:
        if id(m) in seen:
            return
        seen.add(id(m))
        for op in m.operations:
            counts[op.type.name] += 1
        for operand in m.operands:
            if operand.subgraph is not None:
                walk(operand.subgraph)

    walk(model)
    return counts


async def _timed(fn: Callable[[], Awaitable[Any]], warmup: int, runs: int, tick: Callable[[], None],
                 beside: Callable[[], Any] | None = None) -> tuple[Latency, Latency | None, Any]:
    """Wall-clock and CPU milliseconds per call of ``fn`` (and of ``beside``, run right after
    each, if given), summarized."""
    ours: tuple[list[float], list[float]] = ([], [])
    theirs: tuple[list[float], list[float]] = ([], [])
    last: Any = None
    for k in range(warmup + runs):
        t, c = time.perf_counter_ns(), time.process_time_ns()
        last = await fn()
        dt, dc = time.perf_counter_ns() - t, time.process_time_ns() - c
        if k >= warmup:
            ours[0].append(dt / 1e6)
            ours[1].append(dc / 1e6)
        if beside is not None:
            t, c = time.perf_counter_ns(), time.process_time_ns()
            beside()
            if k >= warmup:
                theirs[0].append((time.perf_counter_ns() - t) / 1e6)
                theirs[1].append((time.process_time_ns() - c) / 1e6)
        tick()
    return summarize(*ours), summarize(*theirs) if beside is not None else None, last


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=np.asarray(x).dtype.kind == "f")
                                    for x, y in zip(a, b))


def _fixed_feeds(opts: BenchOptions) -> dict[str, np.ndarray]:
    """What the reference is fed for the inputs nnrt fixed at load: 0-d, or the shape --input-shape gives."""
    return {n: np.full(tuple(opts.input_shapes.get(n, ())), v) for n, v in opts.load_values.items()}


def _open_reference(report: BenchReport, model: Model, path: str, specs: Sequence[InputSpec],
                    inputs: list[Any], fixed: Mapping[str, np.ndarray]) -> Reference | None:
    try:
        ref = open_reference(path, report.format, {s.name: s.shape for s in specs}, fixed=fixed)
        names = [s.name for s in specs]
        known = {v.input for v in state_variables(model)}  # these start at the importer's initial values
        for k, spec in enumerate(specs):  # other inputs the reference lacks start at (real) zero, as a stream does
            if k not in known and spec.name not in ref.input_names and all(n in names for n in ref.input_names):
                zero = spec.zero_point if spec.type.is_quantized else 0
                inputs[k] = np.full_like(inputs[k], zero) if isinstance(inputs[k], np.ndarray) else type(inputs[k])(zero)
        feeds_for(ref, names, inputs)  # fails now if the inputs cannot be paired
    except ReferenceUnavailable as err:
        report.reference_note = str(err)
        return None
    report.reference = ref.name
    return ref


async def run_bench(path: str, options: BenchOptions | None = None) -> BenchReport:
    """Benchmark the model at ``path``; NnrtError for a model nnrt cannot load or run."""
    opts = options or BenchOptions()
    t = time.perf_counter()
    loaded = open_model(path, opts.input_shapes, opts.load_values)
    load_ms = (time.perf_counter() - t) * 1e3
    model = loaded.model
    specs = input_specs(model, opts.input_shapes, opts.input_values)
    inputs = with_initial_state(model, make_inputs(specs, seed=opts.seed, values=opts.input_values))
    out_names = [model.operands[i].name or f"output{k}" for k, i in enumerate(model.output_indexes)]
    op_types = _count_ops(model)
    report = BenchReport(loaded.path, loaded.format, loaded.size, op_types.total(), dict(op_types),
                         load_ms, 0.0, specs, out_names)
    ref: Reference | None = None
    if not opts.reference:
        report.reference_note = "reference comparison turned off (--no-reference)"
    elif loaded.format == "nnrt":
        report.reference_note = "an nnrt model file has no reference runtime"
    else:
        ref = _open_reference(report, model, path, specs, inputs, _fixed_feeds(opts))
    # One thread each: the references run on one thread, so BLAS is pinned to one here too
    # (unpinned, OpenBLAS took both cores of an idle machine and every core of a busy one), and
    # glibc keeps freed multi-MB blocks mapped as an app's latency settings would.
    device = CpuDevice(blas_threads=1, tune_malloc=True)
    try:
        t = time.perf_counter()
        prepared = await device.prepare_model(model)
        report.prepare_ms = (time.perf_counter() - t) * 1e3
        if prepared.provisional:  # measure the compiled kernels, not their numpy stand-ins
            t = time.perf_counter()
            await prepared.wait_compiled()
            report.compile_wait_ms = (time.perf_counter() - t) * 1e3
        first = await prepared.execute(inputs, loop_timeout=opts.loop_timeout)
        baseline = list(first.outputs)
        beside = None
        if ref is not None:
            try:
                beside = await _compare(report, ref, prepared, path, specs, inputs, baseline, opts)
            except ReferenceUnavailable as err:
                report.reference, report.reference_note = None, str(err)
                report.accuracy, report.reference_spread, report.stream = [], [], []
        await _run_modes(report, prepared, inputs, baseline, opts, beside)
        if opts.profile:
            tick = opts.progress("profile", opts.warmup + opts.runs)
            report.profile = profile_plan(prepared.plan, inputs, runs=opts.runs, warmup=max(opts.warmup, 1),
                                          loop_timeout=opts.loop_timeout, tick=tick)
    finally:
        device.close()
    return report


async def _compare(report: BenchReport, ref: Reference, prepared: PreparedModel, path: str, specs: Sequence[InputSpec],
                   inputs: list[Any], baseline: list[Any], opts: BenchOptions) -> Callable[[], Any]:
    """Compare nnrt's first outputs with the reference's (and, as asked, the spread and a
    stream); returns the reference run to interleave with nnrt's."""
    model, out_names = prepared.model, report.output_names
    feeds = feeds_for(ref, [s.name for s in specs], inputs)
    ref_out = ref.run(feeds)
    pairs = pair_outputs(ref, out_names)
    for ours, theirs in pairs:
        quantized = model.operands[model.output_indexes[ours]].type.is_quantized
        report.accuracy.append(compare(out_names[ours], baseline[ours], ref_out[theirs], quantized=quantized))
    if opts.reference_spread:
        _spread(report, path, specs, feeds, ref_out, pairs, _fixed_feeds(opts))
    if opts.stream_steps > 0:
        report.stream, report.stream_varied = await run_stream(
            prepared, path, report.format, specs, inputs, pairs, out_names, steps=opts.stream_steps, seed=opts.seed,
            values=dict(opts.input_values), fixed=_fixed_feeds(opts), loop_timeout=opts.loop_timeout)
        report.stream_steps = opts.stream_steps if report.stream else 0
    return lambda: ref.run(feeds)


def _spread(report: BenchReport, path: str, specs: Sequence[InputSpec], feeds: dict[str, np.ndarray],
            ref_out: list[Any], pairs: list[tuple[int, int]], fixed: Mapping[str, np.ndarray]) -> None:
    try:
        plain = open_reference(path, report.format, {s.name: s.shape for s in specs}, plain=True, fixed=fixed)
        plain_out = plain.run(feeds)
    except ReferenceUnavailable as err:
        report.reference_note = f"no spread: {err}"
        return
    for acc, (_ours, theirs) in zip(report.accuracy, pairs):
        quantized = acc.quant_units is not None
        report.reference_spread.append(compare(acc.output, plain_out[theirs], ref_out[theirs], quantized=quantized))


async def _run_modes(report: BenchReport, prepared: PreparedModel, inputs: list[Any], baseline: list[Any],
                     opts: BenchOptions, beside: Callable[[], Any] | None) -> None:
    for mode in opts.modes:
        tick = opts.progress(mode, opts.warmup + opts.runs)
        async with AsyncExitStack() as stack:
            run = await _runner(mode, prepared, inputs, baseline, opts.loop_timeout, stack)
            with_ref = beside if mode == "execute" else None
            ours, theirs, last = await _timed(run, opts.warmup, opts.runs, tick, with_ref)
        if theirs is not None:
            report.reference_latency = theirs
        report.modes[mode] = ours
        if not _same(last, baseline):
            report.disagreeing_modes.append(mode)


async def _runner(mode: str, prepared: PreparedModel, inputs: list[Any], baseline: list[Any], lt: float | None,
                  stack: AsyncExitStack) -> Callable[[], Awaitable[list[Any]]]:
    """One execution in ``mode``, returning its outputs (the burst is closed with ``stack``)."""
    if mode == "execute":
        async def run() -> list[Any]:
            return list((await prepared.execute(inputs, loop_timeout=lt)).outputs)

        return run
    if mode == "fenced":
        bufs = [np.empty_like(np.asarray(o)) for o in baseline]

        async def run_fenced() -> list[Any]:
            fence, _callback = await prepared.execute_fenced(inputs, bufs, loop_timeout=lt)
            await fence
            return bufs

        return run_fenced
    burst = await stack.enter_async_context(prepared.burst())

    async def run_burst() -> list[Any]:
        return list((await burst.execute(inputs, loop_timeout=lt)).outputs)

    return run_burst
