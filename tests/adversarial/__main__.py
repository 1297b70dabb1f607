"""``python -m tests.adversarial [--long] [pytest args]``: the adversarial suite alone, with its figures."""

from __future__ import annotations

import sys

import pytest


def main() -> int:
    args = sys.argv[1:]
    return int(pytest.main(["tests/adversarial", "-p", "no:cacheprovider", *args]))


if __name__ == "__main__":
    sys.exit(main())
