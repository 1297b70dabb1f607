"""Real models from public PyPI packages: accuracy and speed against their reference runtimes.

For every real model it can find (the vendored ones in ``tests/data/models/``, those fetched by
``benchmarks/fetch_models.py`` into ``~/.cache/nnrt/models`` or ``$NNRT_MODELS``, and any
``--models DIR``), runs ``nnrt bench``'s machinery (``nnrt.bench.run_bench``: the same seeded
inputs for nnrt and the reference, one thread each, runs interleaved one for one) and prints
one row per model: source package, nnrt operations, the largest error against the reference
(float: atol 1e-4 + rtol 1e-3; quantized: 3 units end to end), the share of that tolerance
used by the worst element (``used``; <= 1 passes, ``u`` = quantized units) and, as a noise floor,
the same figure for the reference's own plainer path against its default one (``spread``:
LiteRT's reference kernels, ONNX Runtime unoptimized); streaming models are also compared
over a stream of 40 steps with their state carried (``nnrt bench --stream``); nnrt's and the reference's
median ms, their ratio (and the ratio of their median CPU times, which other processes' load
on a shared machine does not inflate), and the three op types that take the most time (``--profile``).
Models ``nnrt.load`` rejects are listed with the rejection reasons, grouped by op type.

Then the figures of issue 14, each next to its target: the median nnrt / ONNX Runtime ratio
over the ONNX CNNs (<= 1.3x, none above 2x), the median nnrt / LiteRT ratio over the TFLite
models (<= 2.5x), and one step of a small int8 streaming model against LiteRT's ``invoke``
(<= 3x)::

    python benchmarks/real_models.py                      # vendored + fetched models
    python benchmarks/real_models.py --models /work/models --runs 20 --json real.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tomllib
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

from nnrt.bench import BenchOptions, run_bench
from nnrt.errors import NnrtError
from nnrt.importers import UnsupportedModelError, load
from nnrt.ops import _gemm

ROOT = Path(__file__).resolve().parents[1]
VENDORED = ROOT / "tests" / "data" / "models"
LIST = Path(__file__).with_name("models.toml")
FETCHED = Path(os.environ.get("NNRT_MODELS", Path.home() / ".cache" / "nnrt" / "models"))
SUFFIXES = (".tflite", ".onnx")

ONNX_TARGET, ONNX_MAX, TFLITE_TARGET, STREAM_TARGET = 1.3, 2.0, 2.5, 3.0
#: Streaming models are also compared over a stream of this many steps, state carried.
STREAM_STEPS = 40


def find_models(dirs: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """(file, models.toml entry or {}) for every model file found, each file name once."""
    with open(LIST, "rb") as f:
        entries = {e["file"]: e for e in tomllib.load(f)["model"]}
    found: dict[str, Path] = {}
    for d in dirs:
        for sub in (d, d / "tflite", d / "onnx"):
            if sub.is_dir():
                for p in sorted(sub.iterdir()):
                    if p.suffix in SUFFIXES and p.name not in found:
                        found[p.name] = p
    order = {name: k for k, name in enumerate(entries)}
    names = sorted(found, key=lambda n: (order.get(n, len(order)), n))
    return [(found[n], entries.get(n, {})) for n in names]


def _rejection_summary(err: UnsupportedModelError) -> str:
    by_type: Counter[str] = Counter(r.op_type for r in err.rejections)
    first = {r.op_type: r.reason for r in reversed(err.rejections)}
    return "; ".join(f"{t} x{n}: {first[t]}" for t, n in by_type.most_common())


def _worst(accs: list[Any]) -> str:
    """The worst of a list of ``Accuracy``: quantized units, else tolerance used (<= 1 passes)."""
    if not accs:
        return "-"
    if any(a.quant_units is not None for a in accs):
        return f"{max(a.quant_units or 0 for a in accs)}u"
    return f"{max(a.tolerance_used or 0.0 for a in accs):.2f}"


def load_peak(path: Path, shapes: dict[str, Any], values: dict[str, Any] | None = None) -> float:
    """Peak memory traced while ``nnrt.load`` reads ``path``, over the file's size (a separate
    load: tracing slows it, so the timed load in the table is untraced)."""
    tracemalloc.start()
    try:
        load(path, input_shapes=shapes, input_values=values)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / path.stat().st_size


def _max_error(accs: list[Any]) -> str:
    """The largest error of a list of ``Accuracy``: quantized units, else the max absolute error."""
    if not accs:
        return "-"
    if any(a.quant_units is not None for a in accs):
        return f"{max(a.quant_units or 0 for a in accs)}u"
    return f"{max(a.max_abs for a in accs):.2g}"


async def bench_all(models: list[tuple[Path, dict[str, Any]]], runs: int, warmup: int) -> list[dict[str, Any]]:
    rows = []
    for path, entry in models:
        row: dict[str, Any] = {"model": path.name, "package": entry.get("package", "?"), "kind": entry.get("kind", "?"),
                               "format": "tflite" if path.suffix == ".tflite" else "onnx"}
        opts = BenchOptions(runs=runs, warmup=warmup, modes=("execute",), profile=True, reference_spread=True,
                            stream_steps=STREAM_STEPS if entry.get("kind") == "streaming" else 0,
                            input_shapes=entry.get("input_shapes", {}), input_values=entry.get("input_values", {}),
                            load_values=entry.get("load_values", {}))
        sys.stderr.write(f"  {path.name} ...\n")
        try:
            r = await run_bench(str(path), opts)
        except UnsupportedModelError as err:
            row.update(status="rejected", reasons=_rejection_summary(err), rejected_nodes=len(err.rejections))
        except NnrtError as err:
            row.update(status="failed", reasons=str(err).splitlines()[0][:200])
        else:
            checked = r.accuracy + r.stream
            row.update(size_mb=path.stat().st_size / 1e6,
                       load_peak=load_peak(path, entry.get("input_shapes", {}), entry.get("load_values", {})))
            row.update(status="ran", ops=r.operations, load_ms=r.load_ms, prepare_ms=r.prepare_ms, max_error=_max_error(checked),
                       within=r.accurate, tol_used=_worst(checked), spread=_worst(r.reference_spread),
                       nnrt_ms=r.modes["execute"].p50,
                       reference=r.reference, reference_note=r.reference_note,
                       reference_ms=r.reference_latency.p50 if r.reference_latency else None, ratio=r.ratio,
                       cpu_ratio=r.cpu_ratio,
                       top=[(t.op_type, t.share) for t in r.profile.op_types[:3]] if r.profile else [],
                       quantized_io=any(s.type.is_quantized for s in r.inputs))
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    w = max([len(r["model"]) for r in rows] + [5])
    sys.stdout.write(f"{'model':<{w}} {'package':<21}{'ops':>5} {'max err':>8} {'tol':>4}{'used':>6}{'spread':>7}"
                     f"{'load ms':>9}{'prep ms':>9}{'nnrt ms':>10}{'ref ms':>10}{'ratio':>8}{'cpu':>8}  top op types by time\n")
    for r in rows:
        if r["status"] != "ran":
            continue
        tol = "-" if r["within"] is None else ("yes" if r["within"] else "NO")
        ref = f"{r['reference_ms']:10.3f}" if r["reference_ms"] is not None else f"{'-':>10}"
        ratio = f"{r['ratio']:7.2f}x" if r["ratio"] is not None else f"{'-':>8}"
        ratio += f"{r['cpu_ratio']:7.2f}x" if r["cpu_ratio"] is not None else f"{'-':>8}"
        top = ", ".join(f"{t} {s:.0%}" for t, s in r["top"])
        sys.stdout.write(f"{r['model']:<{w}} {r['package']:<21}{r['ops']:>5} {r['max_error']:>8} {tol:>4}"
                         f"{r['tol_used']:>6}{r['spread']:>7}{r['load_ms']:9.1f}{r['prepare_ms']:9.1f}{r['nnrt_ms']:10.3f}"
                         f"{ref}{ratio}  {top}\n")
        if r["reference_ms"] is None:
            sys.stdout.write(f"{'':<{w}}   (no reference: {r['reference_note']})\n")
    other = [r for r in rows if r["status"] != "ran"]
    if other:
        sys.stdout.write(f"\nnot run ({len(other)} of {len(rows)}):\n")
        for r in other:
            sys.stdout.write(f"  {r['model']} ({r['package']}): {r['status']}: {r['reasons']}\n")


def _median_line(name: str, ratios: list[float], target: float, need: int, extra: str = "") -> None:
    if not ratios:
        sys.stdout.write(f"  {name:<58} no model ran (target <= {target:.1f}x over >= {need})\n")
        return
    med = statistics.median(ratios)
    met = med <= target and len(ratios) >= need
    sys.stdout.write(f"  {name:<58} {med:6.2f}x over {len(ratios)} (target <= {target:.1f}x over >= {need}: "
                     f"{'met' if met else 'NOT met'}){extra}\n")


def print_targets(rows: list[dict[str, Any]]) -> None:
    ran = [r for r in rows if r["status"] == "ran" and r["ratio"] is not None]
    sys.stdout.write("\ntargets of issues 13 and 14 (ratios of medians, nnrt execute / reference, one thread each; wall clock,\n"
                     "then CPU time, which the machine's other load does not inflate):\n")
    for key, how in (("ratio", "wall"), ("cpu_ratio", "CPU")):
        onnx = [r[key] for r in ran if r["format"] == "onnx" and r["kind"] == "cnn" and r[key] is not None]
        worst = f"; worst {max(onnx):.2f}x (target <= {ONNX_MAX:.1f}x)" if onnx else ""
        _median_line(f"median nnrt / ONNX Runtime, ONNX CNNs ({how})", onnx, ONNX_TARGET, 5, worst)
        tfl = [r[key] for r in ran if r["format"] == "tflite" and r[key] is not None]
        _median_line(f"median nnrt / LiteRT, TFLite models ({how})", tfl, TFLITE_TARGET, 5)
        streams = [r[key] for r in ran if r["format"] == "tflite" and r["kind"] == "streaming" and r["quantized_io"]
                   and r[key] is not None]
        _median_line(f"int8 streaming step: await execute / LiteRT invoke ({how})", streams, STREAM_TARGET, 1)
    loaded = [r for r in rows if r["status"] == "ran"]
    if loaded:
        large = max(loaded, key=lambda r: r["size_mb"])
        sys.stdout.write(f"  load of the largest model, {large['model']} ({large['size_mb']:.1f} MB): {large['load_ms']:.0f} ms, "
                         f"peak memory {large['load_peak']:.2f}x the file (issue 13: 10 MB in < 500 ms, peak < 2x)\n")
        big = [r for r in loaded if r["size_mb"] >= 5]  # on small files fixed costs dominate the ratio
        if big:
            worst = max(big, key=lambda r: r["load_peak"])
            sys.stdout.write(f"  models of 5 MB or more: slowest load {max(r['load_ms'] for r in big):.0f} ms, highest peak "
                             f"{worst['load_peak']:.2f}x ({worst['model']})\n")
        slow = max(loaded, key=lambda r: r["load_ms"] + r["prepare_ms"])
        sys.stdout.write(f"  slowest load + prepare: {slow['model']} {slow['load_ms'] + slow['prepare_ms']:.0f} ms "
                         "(issue 14: import plus first preparation of the largest model < 2000 ms)\n")
    accurate = [r for r in rows if r["status"] == "ran" and r["within"] is not None]
    sys.stdout.write(f"  within tolerance of the reference: {sum(r['within'] for r in accurate)} of {len(accurate)} compared; "
                     f"{sum(r['status'] != 'ran' for r in rows)} of {len(rows)} models not run\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, action="append", default=[], help="another directory of models")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="5 runs, 1 warm-up")
    parser.add_argument("--only", default="", help="only models whose file name contains this (or one of these, comma-separated)")
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    args = parser.parse_args(argv)
    runs, warmup = (5, 1) if args.quick else (args.runs, args.warmup)
    wanted = args.only.split(",")
    models = [(p, e) for p, e in find_models([VENDORED, FETCHED, *args.models]) if any(w in p.name for w in wanted)]
    sys.stdout.write(f"real models: {len(models)} found; {runs} runs each after {warmup} warm-up, nnrt and reference "
                     f"interleaved, one thread each; float32 products: {_gemm.describe()}\n")
    rows = asyncio.run(bench_all(models, runs, warmup))
    print_table(rows)
    print_targets(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
