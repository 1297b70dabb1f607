"""``python -m nnrt.conformance``: run the CTS cases and print per-operation results.

Options: ``--op NAME`` (repeatable) keeps cases using that operation, ``--spec TEXT`` keeps
specs whose name contains TEXT, ``--failures N`` prints up to N failing cases (default 20),
``--json FILE`` writes every case's result. Exits 1 when any supported case fails, 2 when
an ``--op`` names no operation or the selection matches no case. On a terminal, a progress
line on stderr shows the spec being run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TextIO

from nnrt._progress import Progress, progress_stream
from nnrt.conformance._cts import CaseResult, case_ops, iter_specs, load_spec, run_case
from nnrt.devices import CpuDevice
from nnrt.types import OperationType


async def run_conformance(ops: Sequence[str] = (), spec_filter: str = "", *, progress: TextIO | None = None) -> list[CaseResult]:
    """Run the selected cases on a fresh CPU device; ``progress``: a stream for a progress line."""
    device = CpuDevice(name="nnrt-cpu-conformance")
    results: list[CaseResult] = []
    specs = [spec for spec in iter_specs() if not spec_filter or spec_filter in spec]
    bar = Progress("conformance", len(specs), progress)
    try:
        for k, spec in enumerate(specs):
            bar.update(k, f"{len(results)} cases, {spec}")
            for case in load_spec(spec):
                if ops and not set(ops) & set(case_ops(case)):
                    continue
                results.append(await run_case(case, device))
    finally:
        bar.close()
        device.close()
    return results


def _table(results: list[CaseResult]) -> str:
    per_op: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        for op in r.ops:
            per_op[op][r.status] += 1
    lines = [f"{'operation':32} {'cases':>6} {'passed':>7} {'failed':>7} {'unsupported':>12}"]
    for op in sorted(per_op):
        c = per_op[op]
        lines.append(f"{op:32} {sum(c.values()):6} {c['pass']:7} {c['fail']:7} {c['unsupported']:12}")
    total = Counter(r.status for r in results)
    lines.append(f"{'TOTAL (cases)':32} {len(results):6} {total['pass']:7} {total['fail']:7} {total['unsupported']:12}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nnrt.conformance", description=__doc__.splitlines()[0])
    parser.add_argument("--op", action="append", default=[], help="only cases using this operation")
    parser.add_argument("--spec", default="", help="only specs whose name contains this text")
    parser.add_argument("--failures", type=int, default=20, help="failing cases to list")
    parser.add_argument("--json", help="write every case's result to this file")
    args = parser.parse_args(argv)
    unknown = [op for op in args.op if op not in OperationType.__members__]
    if unknown:
        parser.error(f"--op {unknown[0]}: no such operation (names are OperationType's, e.g. CONV_2D)")
    t = time.perf_counter()
    results = asyncio.run(run_conformance(args.op, args.spec, progress=progress_stream()))
    took = time.perf_counter() - t
    if not results:
        sys.stderr.write("python -m nnrt.conformance: the selection matches no case\n")
        return 2
    out = sys.stdout
    out.write(_table(results) + "\n")
    failed = [r for r in results if r.status == "fail"]
    for r in failed[: args.failures]:
        out.write(f"FAIL {r.name} [{','.join(r.ops)}]: {r.message}\n")
    out.write(f"{sum(r.status == 'pass' for r in results)} passed, {len(failed)} failed, "
              f"{sum(r.status == 'unsupported' for r in results)} unsupported in {took:.1f} s\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dataclasses.asdict(r) | {"ops": list(r.ops)} for r in results], f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
