"""Property: whatever the order of add, add_after, get, done and time passing, the queue
never hands one key to two workers at once and never loses a key that was added."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from nodepool_operator.runtime import clock as clock_
from nodepool_operator.runtime import workqueue

KEYS = ("a", "b", "c", "d")
_names = itertools.count()

Op = tuple[str, str, int]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(KEYS), st.just(0)),
        st.tuples(st.just("add_after"), st.sampled_from(KEYS), st.integers(1, 3)),
        st.tuples(st.just("advance"), st.just(""), st.integers(1, 2)),
        st.tuples(st.just("get"), st.just(""), st.just(0)),
        st.tuples(st.just("done"), st.just(""), st.integers(0, 3)),
        st.tuples(st.just("stray_done"), st.sampled_from(KEYS), st.just(0)),
    ),
    max_size=60,
)


@dataclass
class Model:
    """What the queue must contain: keys needing work, keys in flight, pending delays."""

    dirty: set[str] = field(default_factory=set)
    processing: set[str] = field(default_factory=set)
    delayed: dict[str, float] = field(default_factory=dict)

    def release_delayed(self, now: float) -> None:
        for key, ready_at in list(self.delayed.items()):
            if ready_at <= now:
                del self.delayed[key]
                self.dirty.add(key)

    def waiting(self) -> set[str]:
        return self.dirty - self.processing


@settings(max_examples=150, deadline=None)
@given(ops)
async def test_no_key_is_handed_out_twice_concurrently_and_none_is_lost(
    sequence: list[Op],
) -> None:
    clock = clock_.FakeClock()
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue(
        name=f"property-{next(_names)}", clock=clock
    )
    model = Model()
    in_flight: list[str] = []
    try:
        for op, key, number in sequence:
            if op == "add":
                queue.add(key)
                model.dirty.add(key)
            elif op == "add_after":
                queue.add_after(key, float(number))
                ready_at = clock.now() + number
                model.delayed[key] = min(model.delayed.get(key, ready_at), ready_at)
            elif op == "advance":
                await clock.advance(float(number))
                model.release_delayed(clock.now())
            elif op == "get":
                if not len(queue):
                    continue  # get() would wait; workers only block, they never fail
                got = await queue.get()
                assert got not in model.processing, f"{got} handed out while in flight"
                assert got in model.waiting()
                model.dirty.discard(got)
                model.processing.add(got)
                in_flight.append(got)
            elif op == "done":
                if not in_flight:
                    continue
                finished = in_flight.pop(number % len(in_flight))
                queue.done(finished)
                model.processing.discard(finished)
            elif op == "stray_done" and key not in model.processing:
                queue.done(key)
            assert len(queue) == len(model.waiting())

        # Finish everything, let every delay expire: each key still owed comes out once.
        for finished in in_flight:
            queue.done(finished)
            model.processing.discard(finished)
        await clock.advance(10.0)
        model.release_delayed(clock.now())
        drained: list[str] = []
        while len(queue):
            got = await queue.get()
            drained.append(got)
            queue.done(got)
        assert sorted(drained) == sorted(model.dirty)
    finally:
        queue.shut_down()
