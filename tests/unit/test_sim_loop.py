"""The virtual-time loop: sleeps take no wall time and land exactly; stalls and runaways end."""

from __future__ import annotations

import asyncio

import pytest

from nnrt.sim import LoopClock, SimulationError, VirtualTimeLoop


def run(loop: VirtualTimeLoop, coro: object) -> object:
    try:
        return loop.run_until_complete(coro)  # type: ignore[arg-type]
    finally:
        loop.close()


def test_sleeps_jump_virtual_time_in_order() -> None:
    loop = VirtualTimeLoop()
    order: list[tuple[str, float]] = []

    async def sleeper(name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        order.append((name, loop.time()))

    async def main() -> None:
        await asyncio.gather(sleeper("b", 3600.0), sleeper("a", 0.25), sleeper("c", 1e-6))

    run(loop, main())
    assert order == [("c", 1e-6), ("a", 0.25), ("b", 3600.0)]


def test_timers_land_exactly_on_their_time() -> None:
    loop = VirtualTimeLoop()
    seen: list[float] = []
    whens = [0.1, 0.3, 1e3 + 1e-9, 2e3]

    async def main() -> None:
        done = loop.create_future()
        for w in whens:
            loop.call_at(w, lambda: seen.append(loop.time()))
        loop.call_at(whens[-1], done.set_result, None)
        await done

    run(loop, main())
    assert seen == whens


def test_a_stall_is_an_error_not_a_hang() -> None:
    loop = VirtualTimeLoop()

    async def main() -> None:
        await loop.create_future()  # nobody will ever resolve it

    with pytest.raises(SimulationError, match="stalled"):
        run(loop, main())


def test_the_time_limit_ends_a_runaway() -> None:
    loop = VirtualTimeLoop(limit_s=10.0)

    async def main() -> None:
        for _ in range(1_000_000):  # a workload that would run for 11 virtual days
            await asyncio.sleep(1.0)

    with pytest.raises(SimulationError, match="max_time_s"):
        run(loop, main())


def test_skip_to_moves_time_only_when_nothing_can_happen() -> None:
    loop = VirtualTimeLoop()
    clock = LoopClock(loop)

    async def main() -> tuple[bool, bool, float]:
        loop.call_at(5.0, lambda: None)
        first = clock.skip_to(4.0)  # nothing before 4 s: moves
        second = clock.skip_to(6.0)  # a timer at 5 s: refuses
        return first, second, clock.now()

    assert run(loop, main()) == (True, False, 4.0)
