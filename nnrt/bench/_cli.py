"""``nnrt bench``: the command line over ``run_bench`` and ``crash_test``.

Exit status: 0 when every model ran (and matched its reference, when one ran); 1 when a model
was refused (``NnrtError``: the message names the file, the nodes or the argument), when its
outputs are outside tolerance, or when a crash-test model did not succeed; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from nnrt.bench._crash import OUTCOMES, CrashResult, crash_test
from nnrt.bench._inputs import parse_shape_options, parse_value_options
from nnrt.bench._report import TerminalProgress, format_report
from nnrt.bench._run import MODES, BenchOptions, run_bench
from nnrt.errors import NnrtError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nnrt bench",
        description="Benchmark a model (.tflite, .onnx, or saved with Model.save) on the CPU device: latency in "
                    "execute, fenced and burst modes, accuracy and speed against the reference runtime "
                    "(LiteRT / ONNX Runtime, from pip install 'nnrt[bench]'), and a per-op profile.",
    )
    p.add_argument("model", nargs="?", help="the model file")
    p.add_argument("--runs", type=int, default=50, help="timed executions per mode (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed executions before them (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help="fix an input's dynamic dimensions (repeatable; NAME= for a 0-d tensor)")
    p.add_argument("--input-value", action="append", default=[], metavar="NAME=NUMBER",
                   help="fill an input with one value, e.g. a sample rate (repeatable)")
    p.add_argument("--load-value", action="append", default=[], metavar="NAME=NUMBER",
                   help="fix an input's value when the file is loaded (ONNX): a constant of nnrt's model, so an If "
                        "it decides is taken at load; the reference is still fed it (repeatable)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--no-reference", dest="reference", action="store_false", help="skip the reference runtime")
    p.add_argument("--reference-spread", action="store_true",
                   help="also run the reference's plainer path (LiteRT's reference kernels, ONNX Runtime unoptimized): "
                        "how far two correct implementations differ on this model")
    p.add_argument("--stream", type=int, default=0, metavar="N",
                   help="for a model with state (a TFLite streaming model): also compare N steps with the reference, "
                        "state carried from step to step")
    p.add_argument("--profile", action="store_true", help="time per op type and per step")
    p.add_argument("--top", type=int, default=10, help="slowest steps shown by --profile")
    p.add_argument("--loop-timeout", type=float, default=None, metavar="S",
                   help="WHILE loop timeout per execution (NNAPI's; default 2 s, at most 15 s)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-': to stdout, instead of the text)")
    p.add_argument("--crash-test", nargs="+", metavar="MODEL",
                   help="run each model in a child process with a watchdog: SUCCESS / FAILURE / HANG / CRASH")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="--crash-test watchdog: seconds a model may run after its process started (default 60)")
    return p


def _write(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _dump(path: str, doc: Any) -> None:
    text = json.dumps(doc, indent=1, default=str)
    if path == "-":
        _write(text)
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def main(argv: Sequence[str] | None = None, *, loop: str = "auto") -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.runs <= 0 or args.warmup < 0:
        parser.error("--runs must be positive and --warmup non-negative")
    if args.stream < 0:
        parser.error("--stream must be non-negative")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes {args.modes!r}: choose from {', '.join(MODES)}")
    if (args.model is None) == (args.crash_test is None):
        parser.error("give one MODEL, or --crash-test MODEL [MODEL ...]")
    try:
        shapes = parse_shape_options(args.input_shape)
        values = parse_value_options(args.input_value)
        load_values = parse_value_options(args.load_value, "--load-value")
    except NnrtError as err:
        parser.error(str(err))
    if args.crash_test:
        return _crash_test(args, shapes, values, load_values)
    opts = BenchOptions(runs=args.runs, warmup=args.warmup, seed=args.seed, input_shapes=shapes, input_values=values,
                        load_values=load_values,
                        modes=modes, reference=args.reference, reference_spread=args.reference_spread, stream_steps=args.stream,
                        profile=args.profile,
                        loop_timeout=args.loop_timeout, progress=TerminalProgress(sys.stdout))
    from nnrt.cli import run_async

    async def go() -> Any:
        return await run_bench(args.model, opts)

    try:
        report = run_async(go, loop)
    except NnrtError as err:
        sys.stderr.write(f"nnrt bench: {args.model}: {err}\n")
        if args.json:
            _dump(args.json, {"model": args.model, "error": {"status": err.status.name, "message": str(err)}})
        return 1
    if args.json != "-":  # with --json -, stdout carries the JSON alone
        _write(format_report(report, top=args.top))
    if args.json:
        _dump(args.json, report.as_dict())
    return 0 if report.accurate is not False and not report.disagreeing_modes else 1


def _crash_test(args: argparse.Namespace, shapes: dict[str, list[int]], values: dict[str, float],
                load_values: dict[str, float]) -> int:
    options: dict[str, Any] = {"runs": args.runs, "warmup": args.warmup, "seed": args.seed, "input_shapes": shapes,
                               "input_values": values, "load_values": load_values, "loop_timeout": args.loop_timeout}
    text = args.json != "-"  # with --json -, stdout carries the JSON alone
    if text:
        _write(f"nnrt bench --crash-test: {len(args.crash_test)} model(s), each in a child process, "
               f"watchdog {args.timeout:g} s, {args.runs} executions each")
    width = max(len(m) for m in args.crash_test)

    def show(r: CrashResult) -> None:
        _write(f"  {r.model:<{width}}  {r.outcome:<8} {r.seconds:6.1f} s  {r.detail}")

    results = crash_test(args.crash_test, timeout_s=args.timeout, options=options, on_result=show if text else None)
    counts = {o: sum(r.outcome == o for r in results) for o in OUTCOMES}
    if text:
        _write("summary: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if args.json:
        _dump(args.json, {"crash_test": [r.as_dict() for r in results], "summary": counts})
    return 0 if counts["SUCCESS"] == len(results) else 1
