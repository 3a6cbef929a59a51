"""The tuning cache: keys, hits and misses, damaged files, concurrent writers, fallback to defaults."""

from __future__ import annotations

import json
import multiprocessing
import os
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelink.errors import InvalidArgumentError
from pipelink.tune import KEY_FIELDS, TuneCache, default_cache_dir, key_digest, resolve_params, validate_tuned

KEY = {
    "operator": "layer_norm",
    "operator_version": "1.2.0",
    "source_hash": "0f" * 32,
    "device_name": "NVIDIA H200",
    "compute_capability": "9.0",
    "driver_version": "580.65.06",
    "shapes": {"x": [4096, 4096], "gamma": [4096]},
    "dtypes": {"x": "bfloat16", "gamma": "bfloat16"},
}
PARAMS = {"block_size": 256, "unroll_factor": 4}
CHANGED = {
    "operator": "rms_norm",
    "operator_version": "1.3.0",
    "source_hash": "1f" * 32,
    "device_name": "NVIDIA H100 80GB HBM3",
    "compute_capability": "8.0",
    "driver_version": "575.51.03",
    "shapes": {"x": [4096, 8192], "gamma": [8192]},
    "dtypes": {"x": "float16", "gamma": "float16"},
}


def test_miss_then_hit(tmp_path):
    cache = TuneCache(tmp_path / "sub" / "tune_cache.json")
    assert cache.lookup(KEY) is None
    digest = cache.store(KEY, {"params": PARAMS, "metric": 2.5})
    assert digest == key_digest(KEY)
    assert cache.lookup(KEY) == PARAMS
    entry = cache.entry(KEY)
    assert entry["key"] == KEY and entry["metric"] == 2.5 and "stored_at" in entry
    assert [p.name for p in cache.path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_every_key_field_is_required():
    assert set(CHANGED) == set(KEY_FIELDS)
    for name in KEY_FIELDS:
        with pytest.raises(InvalidArgumentError, match=name):
            key_digest({k: v for k, v in KEY.items() if k != name})
    with pytest.raises(InvalidArgumentError, match="plain JSON"):
        key_digest({**KEY, "extra": object()})


@pytest.mark.parametrize("field", KEY_FIELDS)
def test_changing_any_key_field_misses(tmp_path, field):
    cache = TuneCache(tmp_path / "c.json")
    cache.store(KEY, {"params": PARAMS})
    assert cache.lookup({**KEY, field: CHANGED[field]}) is None
    assert cache.lookup(dict(KEY)) == PARAMS


def test_extra_fields_are_part_of_the_key(tmp_path):
    cache = TuneCache(tmp_path / "c.json")
    cache.store({**KEY, "attrs": {"eps": 1e-5}}, {"params": PARAMS})
    assert cache.lookup(KEY) is None
    assert cache.lookup({**KEY, "attrs": {"eps": 1e-5}}) == PARAMS


@given(st.randoms(use_true_random=False))
def test_digest_ignores_key_order_and_tuple_vs_list(rnd):
    items = list(KEY.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    shuffled["shapes"] = {k: tuple(v) for k, v in reversed(list(KEY["shapes"].items()))}
    assert key_digest(shuffled) == key_digest(KEY)


def test_default_location_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(tmp_path / "pl"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert TuneCache().path == tmp_path / "pl" / "tune_cache.json"
    monkeypatch.delenv("PIPELINK_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "xdg" / "pipelink"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "pipelink"


@pytest.mark.parametrize(
    "content", ["{not json", '{"format": 99, "entries": {}}', '["a"]', '{"format": 1, "entries": []}']
)
def test_a_damaged_cache_warns_reads_as_empty_and_is_set_aside(tmp_path, content):
    cache = TuneCache(tmp_path / "c.json")
    cache.path.write_text(content)
    with pytest.warns(UserWarning, match="damaged"):
        assert cache.lookup(KEY) is None
    cache.store(KEY, {"params": PARAMS})
    assert cache.lookup(KEY) == PARAMS
    assert (tmp_path / "c.json.corrupt").read_text() == content


def test_entries_without_params_are_ignored(tmp_path):
    cache = TuneCache(tmp_path / "c.json")
    cache.path.write_text(json.dumps({"format": 1, "entries": {key_digest(KEY): {"metric": 1}}}))
    with pytest.warns(UserWarning, match="malformed entry"):
        assert cache.lookup(KEY) is None
    with pytest.raises(InvalidArgumentError, match="'params' mapping"):
        cache.store(KEY, {"params": [1, 2]})


def test_remove(tmp_path):
    cache = TuneCache(tmp_path / "c.json")
    cache.store(KEY, {"params": PARAMS})
    cache.store(CHANGED, {"params": {"block_size": 128}})
    assert cache.remove(KEY) and not cache.remove(KEY)
    assert cache.lookup(KEY) is None and cache.lookup(CHANGED) == {"block_size": 128}


def _writer(path: str, worker: int, count: int) -> None:
    cache = TuneCache(path)
    rng = random.Random(worker)
    for i in range(count):
        cache.store({**KEY, "shapes": {"x": [worker, i]}}, {"params": {"block_size": worker * 1000 + i}})
        if rng.random() < 0.3:  # readers interleave with writers and must never see a torn file
            assert cache.lookup({**KEY, "shapes": {"x": [worker, i]}}) == {"block_size": worker * 1000 + i}


def test_concurrent_writers_keep_every_entry(tmp_path):
    path = str(tmp_path / "shared" / "tune_cache.json")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 20)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    cache = TuneCache(path)
    assert len(cache.entries()) == 80
    for w in range(4):
        for i in range(20):
            assert cache.lookup({**KEY, "shapes": {"x": [w, i]}}) == {"block_size": w * 1000 + i}
    assert not [n for n in os.listdir(tmp_path / "shared") if n.endswith(".tmp")]


def test_resolve_params_prefers_a_matching_tuned_entry(tmp_path):
    cache = TuneCache(tmp_path / "c.json")
    defaults = {"block_size": 128, "unroll_factor": 1, "num_warps": 4}
    choice = resolve_params(KEY, defaults, cache=cache)
    assert (choice.params, choice.source, choice.is_tuned) == (defaults, "default", False)
    cache.store(KEY, {"params": PARAMS})
    choice = resolve_params(KEY, defaults, cache=cache)
    assert choice.is_tuned and choice.params == {**defaults, **PARAMS}
    assert key_digest(KEY)[:12] in choice.reason
    assert resolve_params({**KEY, "driver_version": "1"}, defaults, cache=cache).source == "default"


def test_resolve_params_never_raises(tmp_path):
    cache = TuneCache(tmp_path / "c.json")
    cache.store(KEY, {"params": {"block_size": 256, "tile_k": 64}})
    choice = resolve_params(KEY, {"block_size": 128}, cache=cache)
    assert choice.params == {"block_size": 128} and "unknown parameters ['tile_k']" in choice.reason
    bad_key = resolve_params({"operator": "x"}, {"block_size": 128}, cache=cache)
    assert bad_key.source == "default" and "InvalidArgumentError" in bad_key.reason
    (tmp_path / "dir.json").mkdir()
    with pytest.warns(UserWarning, match="cannot be read"):
        unreadable = resolve_params(KEY, {"block_size": 128}, cache=TuneCache(tmp_path / "dir.json"))
    assert unreadable.source == "default"


@pytest.mark.parametrize(
    "content",
    [
        b'{"format": 1, "entries": {"\xff\xfe": {}}}',  # not UTF-8
        b"[" * 100_000 + b"]" * 100_000,  # nested past the stack
        b'{"format": 1, "entries": ' + b'{"a":' * 5000 + b"1" + b"}" * 5001,  # deep inside valid JSON
    ],
)
def test_hostile_cache_files_warn_and_are_rewritten(tmp_path, content):
    # Before: UnicodeDecodeError / RecursionError escaped lookup *and* store, so the cache could never
    # be rebuilt.
    cache = TuneCache(tmp_path / "c.json")
    cache.path.write_bytes(content)
    with pytest.warns(UserWarning, match="damaged|malformed"):
        assert cache.lookup(KEY) is None
    cache.store(KEY, {"params": PARAMS})
    assert cache.lookup(KEY) == PARAMS
    assert json.loads(cache.path.read_text())["entries"][key_digest(KEY)]["params"] == PARAMS


@pytest.mark.parametrize(
    "params", [[1, 2], "block_size=256", 7, None, {"block_size": [256]}, {"block_size": {"v": 1}}]
)
def test_entries_with_wrong_typed_params_are_ignored_and_dropped(tmp_path, params):
    cache = TuneCache(tmp_path / "c.json")
    other = {**KEY, "driver_version": "1"}
    cache.path.write_text(
        json.dumps(
            {
                "format": 1,
                "entries": {key_digest(KEY): {"params": params}, key_digest(other): {"params": PARAMS}},
            }
        )
    )
    with pytest.warns(UserWarning, match="malformed"):
        assert cache.lookup(KEY) is None
        assert cache.lookup(other) == PARAMS  # one bad entry does not cost the good ones
    cache.store(CHANGED, {"params": PARAMS})
    assert set(json.loads(cache.path.read_text())["entries"]) == {key_digest(other), key_digest(CHANGED)}


TUNABLES = {"block": (256, (128, 256, 512)), "unroll": (1, (1, 2, 4)), "alpha": (0.5, None)}


@pytest.mark.parametrize("value", [None, "128", [128], -1, 1e30, True, 128.0, 64])
def test_validate_tuned_refuses_values_a_kernel_does_not_declare(value):
    valid, problems = validate_tuned({"block": value, "unroll": 2}, TUNABLES)
    assert valid == {"unroll": 2}
    assert len(problems) == 1 and "block" in problems[0]


def test_validate_tuned_accepts_declared_values_and_names_unknown_ones():
    valid, problems = validate_tuned({"block": 512, "alpha": 2, "tile": 3}, TUNABLES)
    assert valid == {"block": 512, "alpha": 2}  # an int where the default is a float is a number
    assert problems == ["'tile' is not a tunable of this kernel (it has ['alpha', 'block', 'unroll'])"]


def test_resolve_params_ignores_wrong_typed_values(tmp_path):
    cache = TuneCache(tmp_path / "c.json")
    cache.store(KEY, {"params": {"block_size": "256"}})
    choice = resolve_params(KEY, {"block_size": 128}, cache=cache)
    assert choice.params == {"block_size": 128} and "is a str, not a int" in choice.reason


def test_builtin_lookup_ignores_invalid_tuned_values_with_a_warning(tmp_path, monkeypatch):
    import pipelink as pl
    from pipelink.hardware import HardwareInfo
    from pipelink.tune.kernels import key_fields, lookup_tuned, tunables_of

    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(tmp_path))
    desc = pl.get_operator_info("relu")
    tunables = tunables_of("relu")
    name = next(iter(tunables))
    info = HardwareInfo(kind="cuda", name="NVIDIA H200", compute_capability=(9, 0), driver_version="580")
    key = key_fields("relu", desc.version, info, {"x": (8, 8)}, {"x": "float32"})
    defaults = {k: v[0] for k, v in tunables.items()}
    for bad in (None, str(defaults[name]), [defaults[name]], -1, 1e30):
        TuneCache().store(key, {"params": {name: bad}})
        # null and lists are malformed entries for the cache itself; the rest fail the kernel's tunables.
        with pytest.warns(Warning, match="ignored|malformed"):
            params, source, _ = lookup_tuned(desc, info, ((8, 8),), ("float32",))
        assert (params, source) == (defaults, "default")
    good = next(v for v in tunables[name][1] if v != defaults[name])
    TuneCache().store(key, {"params": {name: good}})
    params, source, _ = lookup_tuned(desc, info, ((8, 8),), ("float32",))
    assert source == "tuned" and params[name] == good
