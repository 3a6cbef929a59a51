"""The memory planner: no two live buffers overlap, offsets aligned, peak never above naive, chains reuse."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelink.graph.planner import BufferRequest, plan_memory


def check_plan(requests, plan):
    buffers = list(plan.buffers.values())
    for b in buffers:
        assert b.offset % b.alignment == 0, f"{b.name} at {b.offset} not aligned to {b.alignment}"
        assert b.offset + b.nbytes <= plan.peak_bytes
    for i, a in enumerate(buffers):
        for b in buffers[i + 1 :]:
            if a.overlaps_in_time(b) and a.nbytes and b.nbytes:
                assert not a.overlaps_in_space(b), f"{a} and {b} are live together and overlap"
    assert plan.peak_bytes <= plan.naive_bytes


requests_strategy = st.lists(
    st.tuples(
        st.integers(0, 5000), st.integers(0, 20), st.integers(0, 6), st.sampled_from([32, 64, 256, 512])
    ),
    min_size=0,
    max_size=40,
).map(lambda items: [BufferRequest(f"b{i}", n, f, f + d, a) for i, (n, f, d, a) in enumerate(items)])


@given(requests_strategy)
@settings(max_examples=300, deadline=None)
def test_plan_properties(requests):
    check_plan(requests, plan_memory(requests))


def test_chain_of_equal_stages_needs_two_buffers():
    # x -> s0 -> t0 -> s1 -> t1 -> ... : t_i is live over steps [i, i+1].
    n, size = 12, 4096
    requests = [BufferRequest(f"t{i}", size, i, i + 1) for i in range(n)]
    plan = plan_memory(requests)
    check_plan(requests, plan)
    assert plan.peak_bytes == 2 * size
    assert plan.naive_bytes == n * size


def test_branch_keeps_tensor_alive_until_last_reader():
    # a is read at step 1 and step 3: it must not share memory with b (step 1..2) or c (2..3).
    requests = [
        BufferRequest("a", 1000, 0, 3),
        BufferRequest("b", 1000, 1, 2),
        BufferRequest("c", 1000, 2, 3),
    ]
    plan = plan_memory(requests)
    check_plan(requests, plan)
    a = plan.buffers["a"]
    assert not a.overlaps_in_space(plan.buffers["b"]) and not a.overlaps_in_space(plan.buffers["c"])


def test_exact_offsets_best_fit():
    # Placed largest first: big@0, keep_a@4096, small@6144, keep_b@7168. Freeing big and small leaves a
    # 4 KiB hole and a 1 KiB hole; a 1 KiB request must take the smaller one.
    requests = [
        BufferRequest("big", 4096, 0, 0),
        BufferRequest("keep_a", 2048, 0, 5),
        BufferRequest("small", 1024, 0, 0),
        BufferRequest("keep_b", 256, 0, 5),
        BufferRequest("next", 1024, 1, 1),
    ]
    plan = plan_memory(requests)
    check_plan(requests, plan)
    assert [plan.buffers[n].offset for n in ("big", "keep_a", "small", "keep_b")] == [0, 4096, 6144, 7168]
    assert plan.buffers["next"].offset == 6144
    assert plan.peak_bytes == 7168 + 256


@pytest.mark.parametrize(
    "bad", [BufferRequest("x", -1, 0, 0), BufferRequest("x", 8, 2, 1), BufferRequest("x", 8, 0, 0, 48)]
)
def test_bad_requests_are_rejected(bad):
    with pytest.raises(ValueError):
        plan_memory([bad])


@given(requests_strategy, st.sampled_from([16, 64]))
@settings(max_examples=200, deadline=None)
def test_guard_bytes_belong_to_their_buffer(requests, guard):
    """Checked mode: the guard after a buffer is never shared with another live buffer (else a stage
    writing a neighbour would look like an overrun, and a real overrun would go unseen)."""
    plan = plan_memory(requests, guard_bytes=guard)
    check_plan(requests, plan)
    buffers = list(plan.buffers.values())
    for b in buffers:
        assert b.guard == guard and b.end == b.offset + b.nbytes + guard <= plan.peak_bytes
    for i, a in enumerate(buffers):
        for b in buffers[i + 1 :]:
            if a.overlaps_in_time(b):
                assert a.end <= b.offset or b.end <= a.offset, f"{a} and {b} share bytes"


def test_negative_guard_bytes_are_refused():
    with pytest.raises(ValueError, match="guard_bytes"):
        plan_memory([BufferRequest("a", 8, 0, 0)], guard_bytes=-1)


def _best_fit_by_scan(free: list[list[int]], nbytes: int, alignment: int) -> int | None:
    """The rule, by brute force: the smallest free block the aligned buffer fits, the lowest of equals."""
    best = None
    for start, end in free:
        offset = -(-start // alignment) * alignment
        if offset + nbytes <= end and (best is None or end - start < best[1]):
            best = (offset, end - start)
    return None if best is None else best[0]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 600), st.sampled_from([1, 16, 64, 256])), max_size=80)
)
def test_the_free_blocks_index_takes_what_a_scan_would(ops):
    """The planner's free list is kept by address and by size (bisection instead of a scan, for pipelines
    of thousands of small tensors). Wrong if it ever picks another block than the best-fit scan, or loses
    or double-counts free bytes while coalescing."""
    from pipelink.graph.planner import _FreeBlocks

    free, arena_end, live = _FreeBlocks(), 0, []
    for take, nbytes, alignment in ops:
        if take or not live:
            expect = _best_fit_by_scan([list(b) for b in free.blocks], nbytes, alignment)
            got = free.take_best_fit(nbytes, alignment)
            assert got == expect
            if got is None:
                tail = free.take_tail(arena_end)
                got = -(-tail // alignment) * alignment
                free.release(tail, got)
                arena_end = max(arena_end, got + nbytes)
            live.append((got, got + nbytes))
        else:
            start, end = live.pop(len(live) // 2)
            free.release(start, end)
        blocks = free.blocks
        assert blocks == sorted(blocks) and all(a[1] < b[0] for a, b in zip(blocks, blocks[1:], strict=False))
        assert sorted((e - s, s) for s, e in blocks) == free.by_size
