"""The garbage collector paused around a step: off while it runs, on again after the last
pause ends, and left off when it was off before."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from nodepool_operator.runtime import gcpause


@pytest.fixture(autouse=True)
def _collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_off_while_the_step_runs_and_on_after() -> None:
    with gcpause.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_is_on_again_after_a_step_that_raises() -> None:
    with pytest.raises(RuntimeError), gcpause.collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_nested_pauses_enable_it_only_when_the_outer_one_ends() -> None:
    with gcpause.collector_paused():
        with gcpause.collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with gcpause.collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_pauses_in_two_threads_enable_it_when_the_last_ends() -> None:
    inside, release = threading.Event(), threading.Event()

    def other_step() -> None:
        with gcpause.collector_paused():
            inside.set()
            release.wait(timeout=10)

    thread = threading.Thread(target=other_step)
    with gcpause.collector_paused():
        thread.start()
        assert inside.wait(timeout=10)
    assert not gc.isenabled()  # the other thread's step still runs
    release.set()
    thread.join(timeout=10)
    assert gc.isenabled()
