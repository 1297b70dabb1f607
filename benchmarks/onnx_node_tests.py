"""The onnx package's backend node tests through ``nnrt.load``: pass / rejected / unsupported / fail per op.

Runs every case of ``onnx.backend.test.loader.load_model_tests(kind="node")`` (about 1,900
single-operator models with inputs and expected outputs) as ``tests/importers/test_onnx_node.py``
does (load from a file, prepare, execute, compare with rtol 1e-3 / atol 1e-7; float16 outputs 4
ulps) and prints one line per op type: ``pass`` ran and matched; ``rejected`` a supported op type
refused for a named reason (an attribute, mode, dtype, or a parameter given as a run-time input
where NNAPI needs a constant); ``unsupported`` an op type the importer has no mapping for; ``fail``
anything else. Cases are counted under every op type they contain, once under ``(cases)``.

Run: ``python benchmarks/onnx_node_tests.py [--failures]``.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nnrt
from tests.importers.onnx_node_cases import load_cases, run_case


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--failures", action="store_true", help="list every failing case with its reason")
    parser.add_argument("--reasons", action="store_true", help="list the rejection reasons by count")
    args = parser.parse_args()
    t = time.perf_counter()
    cases = load_cases()
    built = time.perf_counter() - t
    dev = nnrt.CpuDevice(name="onnx-node-tests")
    t = time.perf_counter()
    try:
        results = [run_case(c, dev) for c in cases]
    finally:
        dev.close()
    ran = time.perf_counter() - t
    per_op: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    total: collections.Counter[str] = collections.Counter()
    for r in results:
        total[r.status] += 1
        for op in r.ops:
            per_op[op][r.status] += 1
    kinds = ("pass", "rejected", "unsupported", "fail")
    print(f"{len(cases)} node tests (built in {built:.1f} s, run in {ran:.1f} s)")
    print(f"{'op type':28}" + "".join(f"{k:>12}" for k in kinds))
    for op in sorted(per_op, key=lambda o: (-per_op[o]["pass"], o)):
        print(f"{op:28}" + "".join(f"{per_op[op][k]:>12}" for k in kinds))
    print(f"{'(cases)':28}" + "".join(f"{total[k]:>12}" for k in kinds))
    if args.reasons:
        reasons: collections.Counter[str] = collections.Counter()
        for r in results:
            if r.status == "rejected":
                for line in r.detail.splitlines()[1:]:
                    reasons[line.split("):", 1)[-1].strip()[:100]] += 1
        for reason, n in reasons.most_common(40):
            print(f"{n:6}  {reason}")
    if args.failures:
        for r in results:
            if r.status == "fail":
                print(f"FAIL {r.name} {list(r.ops)}: {r.detail}")


if __name__ == "__main__":
    main()
