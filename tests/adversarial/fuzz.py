"""Coverage-guided fuzzing of nnrt's byte parsers (the targets in ``_targets``).

Engine: Atheris (libFuzzer driving CPython, with nnrt's bytecode instrumented for coverage)
when it is installed; it is, in the test extra, on Linux x86-64 and macOS where wheels exist.
Without it, a plain mutation loop (the same targets, seeded from the same corpus, byte-level
mutations, no coverage feedback) keeps the tests meaningful but weaker; the figures say which
engine ran.

Run one target in this process (what ``run_fuzzer`` does in a child)::

    python -m tests.adversarial.fuzz TARGET [-runs=N] [-max_total_time=S] [-seed=K] OUT_DIR CORPUS_DIR

An input that makes the target raise anything but an ``NnrtError`` with an NNAPI status is a
crash: libFuzzer prints the traceback, writes the input as ``crash-*`` in the working
directory and exits non-zero. An input that runs longer than ``-timeout`` (default 20 s) is a
hang. ``run_fuzzer`` runs the child and turns its exit into figures.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"
ROOT = Path(__file__).parents[2]


def engine() -> str:
    """``atheris`` when importable, else ``mutator``; ``NNRT_FUZZ_ENGINE=mutator`` forces the fallback."""
    if os.environ.get("NNRT_FUZZ_ENGINE") == "mutator":
        return "mutator"
    try:
        import atheris  # noqa: F401
    except ImportError:
        return "mutator"
    return "atheris"


@dataclass
class FuzzResult:
    target: str
    engine: str
    tries: int
    crashes: int
    hangs: int
    detail: str = ""
    #: Kernels numba failed to compile in the child (``jit.compile_failed``): numpy ran instead.
    uncompiled: int = 0


def run_fuzzer(target: str, runs: int, max_seconds: int, seed: int = 1, timeout_s: int = 20) -> FuzzResult:
    """Fuzz ``target`` for ``runs`` inputs or ``max_seconds`` in a child process; its figures."""
    out = tempfile.mkdtemp(prefix=f"nnrt-fuzz-{target}-")
    cmd = [sys.executable, "-m", "tests.adversarial.fuzz", target, f"-runs={runs}", f"-max_total_time={max_seconds}",
           f"-seed={seed}", f"-timeout={timeout_s}", "-rss_limit_mb=3072", "-max_len=65536", "-print_final_stats=1",
           out, str(CORPUS / target)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OPENBLAS_NUM_THREADS": "1"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out, env=env, timeout=max_seconds + 4 * timeout_s + 60)
    except subprocess.TimeoutExpired as exc:
        return FuzzResult(target, engine(), 0, 0, 1, f"the fuzzer itself hung: {exc}")
    text = proc.stdout + proc.stderr
    done = re.findall(r"Done (\d+) runs", text) or re.findall(r"stat::number_of_executed_units:\s*(\d+)", text)
    tries = int(done[-1]) if done else 0
    hangs = 1 if "libFuzzer: timeout" in text else 0
    crashes = 0 if proc.returncode == 0 or hangs else 1
    detail = "" if proc.returncode == 0 else text[-4000:]
    uncompiled = text.count("jit.compile_failed")
    if uncompiled and not detail:
        detail = "\n".join(line for line in text.splitlines() if "jit.compile_failed" in line)[:4000]
    return FuzzResult(target, engine(), tries, crashes, hangs, detail, uncompiled)


# -- the child ------------------------------------------------------------------------------------


def _main_atheris(target: str, args: list[str]) -> None:
    import atheris

    with atheris.instrument_imports(include=["nnrt"], exclude=compiled_modules()):
        from tests.adversarial._targets import TARGETS, env

    env()
    fn = TARGETS[target]
    atheris.Setup([sys.argv[0], *args], fn)
    atheris.Fuzz()


def compiled_modules() -> list[str]:
    """The modules defining the functions numba compiles (``nnrt.ops._jit.compiled``): left
    uninstrumented, as numba cannot compile bytecode Atheris rewrote; instrumented, every
    compiled kernel fell back to numpy (``jit.compile_failed``) and the fuzzer never reached the
    compiled loops, the ones indexing memory without bounds checks."""
    found = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "nnrt").rglob("_jit*.py"))
    return [*found, "nnrt.execution._fuse_chain", "nnrt.ops._gemm"]  # (affine_f32; the MKL product wrappers)


class _Timeout(Exception):
    pass


def _mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(6)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[min(pos, len(buf) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[min(pos, len(buf) - 1)] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 2:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 3 and buf:
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 4 and corpus:
            other = rng.choice(corpus)
            start = rng.randrange(len(other) + 1)
            buf[pos:pos] = other[start : start + rng.randint(1, 64)]
        elif op == 5 and len(buf) > 8:
            start = rng.randrange(len(buf) - 4)
            buf[pos:pos] = buf[start : start + 4]  # repeat a number-sized chunk
    return bytes(buf)


def _main_mutator(target: str, args: list[str]) -> None:
    from tests.adversarial._targets import TARGETS

    opts = dict(a[1:].split("=", 1) for a in args if a.startswith("-"))
    dirs = [Path(a) for a in args if not a.startswith("-")]
    runs, limit, seed = int(opts.get("runs", 1000)), float(opts.get("max_total_time", 60)), int(opts.get("seed", 1))
    timeout = int(opts.get("timeout", 20))
    corpus = [p.read_bytes() for d in dirs if d.is_dir() for p in sorted(d.iterdir()) if p.is_file()] or [b""]
    rng = random.Random(seed)
    fn = TARGETS[target]
    import time

    def alarm(signum: int, frame: object) -> None:
        raise _Timeout

    signal.signal(signal.SIGALRM, alarm)
    start, done = time.monotonic(), 0
    while done < runs and time.monotonic() - start < limit:
        data = corpus[done] if done < len(corpus) else _mutate(rng, rng.choice(corpus), corpus)
        signal.alarm(timeout)
        try:
            fn(data)
        except _Timeout:
            Path("timeout-input").write_bytes(data)
            sys.stderr.write("ERROR: libFuzzer: timeout (mutator)\n")
            sys.exit(70)
        except BaseException:
            Path("crash-input").write_bytes(data)
            raise
        finally:
            signal.alarm(0)
        done += 1
    sys.stderr.write(f"Done {done} runs (mutator)\n")


def main() -> None:
    target, args = sys.argv[1], sys.argv[2:]
    if engine() == "atheris":
        _main_atheris(target, args)
    else:
        _main_mutator(target, args)


if __name__ == "__main__":
    main()
