"""Parts of the CUDA backend that need no GPU: cache keys, feature derivation, the unavailable reason,
pool bins and the pool's bookkeeping over a fake allocator."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelink.backends.cuda import compiler as cuda_kernels
from pipelink.backends.cuda import device as cuda_device
from pipelink.backends.cuda.pool import BIN_SIZES, MAX_BIN, MIN_BIN, BinnedPool, bin_size, stream_tag


# -- cache keys -------------------------------------------------------------------------------------
def test_cache_key_is_deterministic_and_order_independent():
    a = cuda_kernels.cache_key("src", {"std": "c++17", "define_macro": [("A", "1")]}, "sm_90", (13, 0), "h")
    b = cuda_kernels.cache_key("src", {"define_macro": [("A", "1")], "std": "c++17"}, "sm_90", (13, 0), "h")
    assert a == b and len(a) == 64


@pytest.mark.parametrize("change", ["source", "options", "arch", "nvrtc", "headers"])
def test_cache_key_changes_with_every_input(change):
    args = {"source": "src", "options": {"std": "c++17"}, "arch": "sm_90", "nvrtc": (13, 0), "headers": "h"}

    def key():
        return cuda_kernels.cache_key(
            args["source"], args["options"], args["arch"], args["nvrtc"], args["headers"]
        )

    base = key()
    args[change] = {
        "source": "src2",
        "options": {"std": "c++20"},
        "arch": "sm_80",
        "nvrtc": (13, 1),
        "headers": "h2",
    }[change]
    other = key()
    assert other != base, f"a different {change} must give a different cubin key"


def test_header_digest_sees_header_edits(tmp_path):
    (tmp_path / "common.cuh").write_text("#define A 1\n")
    first = cuda_kernels.header_digest([str(tmp_path)])
    (tmp_path / "common.cuh").write_text("#define A 2\n")
    assert cuda_kernels.header_digest([str(tmp_path)]) != first


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(tmp_path))
    assert cuda_kernels.cache_dir() == tmp_path / "kernels"
    monkeypatch.delenv("PIPELINK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cuda_kernels.cache_dir() == tmp_path / "xdg" / "pipelink" / "kernels"


# -- features -------------------------------------------------------------------------------------
def test_features_of_an_h100_class_device():
    f = cuda_device.derive_features((9, 0), 132, 80 << 30)
    assert f["tensor_core"] == 528 and f["sm_count"] == 132 and f["memory_bytes"] == 80 << 30
    assert f["fp16"] == f["bf16"] == f["tf32"] == f["fp8"] == f["fp64"] == f["atomic_double"] == 1


@pytest.mark.parametrize(
    "cc,expect",
    [
        ((5, 2), {"tensor_core": 0, "fp16": 0, "bf16": 0, "fp8": 0, "atomic_double": 0}),
        ((6, 1), {"tensor_core": 0, "fp16": 1, "bf16": 0, "atomic_double": 1}),
        ((7, 5), {"tensor_core": 4 * 40, "fp16": 1, "bf16": 0, "tf32": 0}),
        ((8, 6), {"bf16": 1, "tf32": 1, "fp8": 0}),
        ((8, 9), {"fp8": 1}),
    ],
)
def test_features_follow_the_compute_capability(cc, expect):
    f = cuda_device.derive_features(cc, 40, 1 << 30)
    assert {k: f[k] for k in expect} == expect


def test_version_text():
    assert cuda_device.version_text(12080) == "12.8"
    assert cuda_device.version_text(13000) == "13.0"


# -- unavailable reason -----------------------------------------------------------------------------
def test_unavailable_reason_when_cuda_core_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.core", None)  # makes `import cuda.core` raise ImportError
    reason = cuda_device.unavailable_reason()
    assert reason is not None and "not installed" in reason and "pipelink[cuda]" in reason


def test_unavailable_reason_is_text_or_none():
    reason = cuda_device.unavailable_reason()
    assert reason is None or any(w in reason for w in ("no CUDA driver", "no CUDA device", "not installed"))


def test_wrapped_cuda_core_error_keeps_the_name():
    class CUDAError(Exception):  # the name cuda.core's exception has
        pass

    err = cuda_device.wrap_cuda_exception(
        CUDAError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access"), "launch", stage="s"
    )
    assert err.cuda_error == "CUDA_ERROR_ILLEGAL_ADDRESS" and err.stage == "s"
    assert cuda_device.is_cuda_exception(CUDAError("x"))


# -- bins and the pool ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "nbytes,expect",
    [
        (0, 512),
        (1, 512),
        (512, 512),
        (513, 1024),
        (4096, 4096),
        (4097, 8192),
        (MAX_BIN, MAX_BIN),
        (MAX_BIN + 1, None),
    ],
)
def test_bin_size(nbytes, expect):
    assert bin_size(nbytes) == expect


def test_bins_are_the_powers_of_two_from_512_to_16_mib():
    assert BIN_SIZES[0] == MIN_BIN == 512 and BIN_SIZES[-1] == MAX_BIN == 16 << 20
    assert all(b == 2 * a for a, b in zip(BIN_SIZES, BIN_SIZES[1:], strict=False))


class FakeDevice:
    """A raw allocator handing out increasing fake addresses; fails when over ``limit`` bytes."""

    def __init__(self, limit: int = 1 << 40):
        self.next, self.live, self.limit = 1 << 20, {}, limit

    def alloc(self, size):
        if sum(self.live.values()) + size > self.limit:
            raise MemoryError(f"fake OOM for {size}")
        ptr, self.next = self.next, self.next + size
        self.live[ptr] = size
        return ptr, ptr

    def free(self, raw):
        del self.live[raw]


def test_pool_reuses_a_released_block_of_the_same_bin():
    dev = FakeDevice()
    pool = BinnedPool(dev.alloc, dev.free)
    a = pool.acquire(1000)
    ptr = a.ptr
    assert a.size == 1024 and pool.stats()["in_use_bytes"] == 1024
    del a
    gc.collect()
    b = pool.acquire(700)  # same 1024 bin: the cached block, no new raw allocation
    assert b.ptr == ptr and len(dev.live) == 1
    assert pool.stats()["bins"] == {}


def test_pool_frees_large_blocks_and_clears_cached_ones():
    dev = FakeDevice()
    pool = BinnedPool(dev.alloc, dev.free)
    big = pool.acquire(MAX_BIN + 1)
    small = pool.acquire(100)
    del big, small
    gc.collect()
    st = pool.stats()
    assert st["in_use_bytes"] == 0 and st["bins"] == {512: 1} and len(dev.live) == 1
    assert pool.clear() == 512 and dev.live == {}


def test_pool_frees_its_cache_and_retries_on_oom():
    dev = FakeDevice(limit=4096)
    pool = BinnedPool(dev.alloc, dev.free)
    blocks = [pool.acquire(1024) for _ in range(4)]
    del blocks
    gc.collect()
    c = pool.acquire(2048)  # needs the cached 1024-byte blocks gone first
    assert c.size == 2048 and sum(dev.live.values()) == 2048
    with pytest.raises(MemoryError):
        pool.acquire(4096)


def test_pool_holds_raw_frees_during_capture():
    dev = FakeDevice()
    pool = BinnedPool(dev.alloc, dev.free)
    pool.hold_frees = True
    big = pool.acquire(MAX_BIN * 2)
    del big
    gc.collect()
    pool.drain()
    assert len(dev.live) == 1, "no raw free may happen while a graph is being captured"
    pool.hold_frees = False
    pool.flush()
    assert dev.live == {}


def test_pool_peak_counts_the_arenas_beside_it():
    # Wrong if the device's peak (pl.memory.stats) missed the arenas held beside the pool, or forgot a
    # peak once the blocks behind it were released.
    dev = FakeDevice()
    pool = BinnedPool(dev.alloc, dev.free)
    pool.base_bytes = 10_000
    block = pool.acquire(3000)  # a 4096-byte bin
    assert pool.peak_bytes == 14_096
    block.release()
    pool.base_bytes = 2_000
    assert pool.peak_bytes == 14_096 and pool.in_use_bytes == 0
    assert pool.acquire(1 << 20).size == 1 << 20 and pool.peak_bytes == 2_000 + (1 << 20)


def test_pool_refuses_a_negative_size_and_a_bad_raw_allocator():
    dev = FakeDevice()
    with pytest.raises(ValueError, match=">= 0"):
        BinnedPool(dev.alloc, dev.free).acquire(-1)
    with pytest.raises(TypeError, match=r"\(pointer, handle\)"):
        BinnedPool(lambda size: 42, dev.free).acquire(100)


def test_pool_reports_changes():
    dev = FakeDevice()
    deltas = []
    pool = BinnedPool(dev.alloc, dev.free, on_change=deltas.append)
    block = pool.acquire(3000)
    block.release()
    pool.drain()
    assert deltas == [4096, -4096]


# -- the backend's own kernels (helpers.cu) ----------------------------------------------------------
@pytest.mark.parametrize(
    "elem, ndim, index32",
    [
        ("unsigned char", 8, 0),
        ("unsigned short", 3, 1),
        ("unsigned int", 2, 1),
        ("unsigned long long", 1, 0),
        ("uint4", 2, 1),
        ("uint4", 5, 0),
    ],
)
def test_helpers_cu_compiles_for_every_unit_size(elem, ndim, index32):
    # Wrong if the .cu file the CUDA backend loads at run time fails to compile for some unit width (the
    # element sizes, and 16-byte vectors), dim count or index size, or lost a kernel the backend launches
    # by name.
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    from pipelink.backends.cuda.helpers import HELPERS_CU, helper_source
    from pipelink.ops.kernel import include_dir

    assert HELPERS_CU.suffix == ".cu" and HELPERS_CU.is_file()
    err, prog = nvrtc.nvrtcCreateProgram(helper_source().encode(), b"helpers.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        opts = [
            b"--gpu-architecture=compute_90",
            b"-std=c++17",
            f"-I{include_dir()}".encode(),
            f"-DPL_ELEM={elem}".encode(),
            f"-DPL_NDIM={ndim}".encode(),
            f"-DPL_COPY32={index32}".encode(),
        ]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        assert res == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace")
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    text = ptx.decode(errors="replace")
    for kernel in (
        "pl_strided_copy",
        "pl_nonfinite_f32",
        "pl_nonfinite_f16",
        "pl_nonfinite_bf16",
        "pl_nonfinite_f64",
    ):
        assert f".entry {kernel}(" in text, kernel


def test_strided_copy_dims_collapse_to_what_both_operands_walk_contiguously():
    from pipelink.backends.cuda.helpers import collapse

    # A contiguous (6, 7, 5) into a contiguous destination: one run of 210 elements.
    assert collapse([6, 7, 5], [35, 5, 1], [35, 5, 1]) == ([210], [1], [1])
    # A transposed source keeps its two walks; size-1 dims vanish.
    assert collapse([4, 1, 6], [1, 99, 4], [6, 6, 1]) == ([4, 6], [1, 4], [6, 1])


def test_a_sticky_cuda_error_corrupts_the_context_for_good():
    # Wrong if work continued on a context after an illegal address (700): the process must restart.
    from pipelink.errors import CUDAError

    health = cuda_device.ContextHealth("cuda:0", "GPU-test")
    err = health.error(1, "cuLaunchKernel", "s")  # an invalid value: the context stays usable
    assert err.cuda_code == 1 and err.stage == "s" and health.corrupted is None
    health.check()
    err = health.error(700, "cuLaunchKernel", "s")
    assert err.cuda_code == 700 and "the process must restart" in err.message
    with pytest.raises(CUDAError, match="corrupted") as info:
        health.check()
    assert info.value.cuda_code == 700 and info.value.device_uuid == "GPU-test"
    wrapped = health.wrap(ValueError("boom"), "launch", "s")
    assert isinstance(wrapped, CUDAError) and "ValueError: boom" in wrapped.message


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("acquire"), st.tuples(st.integers(0, 3 * MAX_BIN), st.integers(0, 2))),
            st.tuples(st.just("release"), st.integers(0, 63)),
            st.tuples(st.just("drop"), st.integers(0, 63)),
            st.tuples(st.just("hold"), st.booleans()),
            st.tuples(st.just("clear"), st.just(0)),
            st.tuples(st.just("flush"), st.just(0)),
        ),
        max_size=60,
    )
)
def test_the_pool_keeps_its_books_whatever_the_order(ops):
    # Wrong if the C pool (_pool.c) ever handed out one address twice, lost a raw block (neither live,
    # cached nor handed out), freed a raw block while frees were held, reported bytes it does not hold, or
    # gave a block last handed out for one stream to another.
    dev = FakeDevice()
    pool = BinnedPool(dev.alloc, dev.free)
    live, last_stream = [], {}
    for op, arg in ops:
        if op == "acquire":
            size, stream = arg
            live.append(pool.acquire(size, stream))  # no other name holds it: dropping it releases it
            assert live[-1].size >= size and live[-1].size == (bin_size(size) or size)
            # FakeDevice never hands out an address twice: a reused address is a cached block
            assert live[-1].stream == stream
            assert last_stream.setdefault(live[-1].ptr, stream) == stream, "a block reused for another stream"
        elif op == "release" and live:
            live.pop(arg % len(live)).release()
        elif op == "drop" and live:
            del live[arg % len(live)]  # garbage: back to the pool from its finalizer
        elif op == "hold":
            pool.hold_frees = arg
        elif op == "clear":
            before = dict(dev.live)
            pool.clear()
            if pool.hold_frees:
                assert all(p in dev.live for p in before), "a raw free while frees are held"
        elif op == "flush":
            pool.flush()
        pointers = [b.ptr for b in live]
        assert len(set(pointers)) == len(pointers), "one address handed out twice"
        assert all(p in dev.live for p in pointers), "a live block's raw memory was freed"
        st_ = pool.stats()
        assert st_["in_use_bytes"] == sum(b.size for b in live) == pool.in_use_bytes
        assert st_["in_use_blocks"] == len(live)
        cached = sum(size * n for size, n in st_["bins"].items())
        assert st_["cached_bytes"] == cached
        assert st_["raw_bytes"] >= st_["in_use_bytes"] + cached
        assert sum(dev.live.values()) >= st_["raw_bytes"]  # held frees still count as device memory
    pool.hold_frees = False
    live.clear()
    pool.clear()
    assert dev.live == {} and pool.stats()["raw_bytes"] == 0, "every raw block goes back"


def test_a_cached_block_is_reused_only_for_its_stream():
    # A run on stream B must not get the block of an output that a run on stream A may still be writing.
    dev = FakeDevice()
    pool = BinnedPool(dev.alloc, dev.free)
    a = pool.acquire(1000, stream=stream_tag(0x5000))
    ptr, first = a.ptr, a.stream
    del a
    gc.collect()
    b = pool.acquire(1000, stream=stream_tag(0x7000))
    assert b.ptr != ptr and len(dev.live) == 2, "another stream takes a new block"
    c = pool.acquire(900, stream=first)
    assert c.ptr == ptr and c.stream == first and len(dev.live) == 2, "the same stream reuses it"
    d = pool.acquire(900)  # the backend's main stream (tag 0)
    assert d.stream == 0 and d.ptr not in (ptr, b.ptr)
    assert stream_tag(0) == 1 and stream_tag(0) != 0, "the legacy default stream is not the main stream"
    with pytest.raises(OverflowError):
        pool.acquire(100, stream=-1)
    with pytest.raises(OverflowError):
        stream_tag(-1)


def test_without_the_c_pool_the_cuda_backend_says_how_to_build_it():
    """A PipeLink installed without a C compiler has no ``_pool`` extension: the CUDA backend's pool
    refuses to start with ModuleLoadError and the fix (docs/architecture.md), never an AttributeError."""
    code = (
        "import importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'pipelink.backends.cuda._pool':\n"
        "            raise ImportError('not built')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from pipelink.backends.cuda.pool import BinnedPool\n"
        "from pipelink.errors import ModuleLoadError\n"
        "try:\n"
        "    BinnedPool(None, None)\n"
        "except ModuleLoadError as e:\n"
        "    print('refused:', e.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout and "Install gcc or clang" in out.stdout, out.stdout
