"""tune_config.json: the seed's example, every problem at once with JSON Pointers, comments, merging."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelink.config.reader import loads_relaxed
from pipelink.errors import ConfigError, ErrorCode, InvalidArgumentError
from pipelink.tune import (
    load_tune_config,
    parse_dtypes,
    parse_shapes,
    tune_schema,
    validate_tune_config,
)

# Seed section 3.7, verbatim.
SEED_EXAMPLE = """{ "tuning_space": { "block_size": [128, 256, 512], "shared_mem_per_block": [16384, 32768],
"unroll_factor": [1, 2, 4] }, "benchmark_criteria": "throughput_gbps",
"warmup_iters": 10, "measure_iters": 50 }"""


def paths(problems):
    return [p.path for p in problems]


def test_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(tune_schema())
    assert tune_schema()["$schema"].endswith("2020-12/schema")


def test_seed_example_validates_unmodified(tmp_path):
    doc = json.loads(SEED_EXAMPLE)
    assert validate_tune_config(doc) == []
    path = tmp_path / "tune_config.json"
    path.write_text(SEED_EXAMPLE)
    cfg = load_tune_config(path, require_target=False)
    assert cfg.space.size == 18  # "3x2x3 = 18 combinations"
    assert (cfg.warmup_iters, cfg.measure_iters, cfg.statistic, cfg.strategy) == (10, 50, "p95", "grid")


def test_seed_example_with_target_supplied_by_the_caller(tmp_path):
    path = tmp_path / "tune_config.json"
    path.write_text(SEED_EXAMPLE)
    with pytest.raises(ConfigError) as info:
        load_tune_config(path)
    assert paths(info.value.errors) == ["/operator", "/shapes"]
    assert "--operator" in info.value.errors[0].message
    cfg = load_tune_config(path, operator="layer_norm", shapes="x=4096x4096,gamma=4096", dtypes="bf16")
    assert cfg.operator == "layer_norm"
    assert cfg.shapes == {"x": (4096, 4096), "gamma": (4096,)}
    assert cfg.dtypes == {"x": "bfloat16", "gamma": "bfloat16"}


def test_all_problems_are_reported_at_once_with_json_pointers():
    doc = {
        "tuning_space": {"block_size": [], "vec": [1, 1], "1x": [2], "mode": ["fast path"]},
        "benchmark_criteria": "bandwidth",
        "measure_iters": 0,
        "statistic": "mean",
        "warmup_iter": 3,
    }
    with pytest.raises(ConfigError) as info:
        load_tune_config(doc)
    err = info.value
    assert err.code is ErrorCode.PIPELINK_ERR_INVALID_CONFIG
    got = paths(err.errors)
    for expected in (
        "/tuning_space/block_size",
        "/tuning_space/vec",
        "/tuning_space/1x",
        "/tuning_space/mode/0",
        "/benchmark_criteria",
        "/measure_iters",
        "/statistic",
        "/warmup_iter",
        "/operator",
        "/shapes",
    ):
        assert expected in got, (expected, got)
    by_path = {p.path: p.message for p in err.errors}
    assert "did you mean 'warmup_iters'" in by_path["/warmup_iter"]
    assert "'1x' is not a C identifier" in by_path["/tuning_space/1x"]
    assert "/tuning_space/block_size" in str(err)  # the message lists every problem


def test_missing_required_members_point_where_they_belong():
    assert paths(validate_tune_config({"tuning_space": {"a": [1]}})) == ["/benchmark_criteria"]
    assert paths(validate_tune_config({})) == ["/benchmark_criteria", "/tuning_space"]
    assert paths(validate_tune_config([1])) == [""]


def test_comments_are_accepted_outside_strings(tmp_path):
    text = """{
      // what to tune
      "description": "see https://example.com/a//b", // not a comment inside the string
      "tuning_space": {"block_size": [128, 256]},  // launch width
      "benchmark_criteria": "latency_us", "operator": "relu", "shapes": {"x": [8]}
    }"""
    path = tmp_path / "t.json"
    path.write_text(text)
    cfg = load_tune_config(path)
    assert cfg.tuning_space == {"block_size": (128, 256)}
    assert loads_relaxed(text)["description"] == "see https://example.com/a//b"
    # One reader for pipeline and tune configs: block comments and trailing commas are accepted here too.
    path.write_text(text.replace("// launch width", "/* launch width */").replace('"x": [8]}', '"x": [8],},'))
    assert load_tune_config(path).tuning_space == {"block_size": (128, 256)}


def test_syntax_errors_and_unreadable_files_are_config_errors(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "tuning_space": {,\n}')
    with pytest.raises(ConfigError, match="not valid JSON") as info:
        load_tune_config(path)
    assert "line 2" in info.value.errors[0].message
    with pytest.raises(ConfigError, match="cannot read"):
        load_tune_config(tmp_path / "missing.json")
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        load_tune_config(path)


def test_budgeted_strategy_needs_max_trials_and_a_budget_implies_it():
    base = {"tuning_space": {"a": [1, 2, 3]}, "benchmark_criteria": "tflops"}
    assert paths(validate_tune_config({**base, "strategy": "budgeted"})) == ["/max_trials"]
    cfg = load_tune_config({**base, "max_trials": 2}, require_target=False)
    assert (cfg.strategy, cfg.max_trials) == ("budgeted", 2)
    problems = validate_tune_config({**base, "strategy": "grid", "max_trials": 2})
    assert paths(problems) == ["/max_trials"] and "use strategy 'budgeted'" in problems[0].message
    assert validate_tune_config({**base, "strategy": "grid", "max_trials": 3}) == []


def test_dtypes_are_checked_and_normalised():
    base = {
        "tuning_space": {"a": [1]},
        "benchmark_criteria": "tflops",
        "operator": "gemm",
        "shapes": {"a": [64, 32], "b": [32, 16]},
    }
    cfg = load_tune_config({**base, "dtypes": {"a": "fp16"}})
    assert cfg.dtypes == {"a": "float16", "b": "float32"}  # unspecified inputs default to float32
    with pytest.raises(ConfigError) as info:
        load_tune_config({**base, "dtypes": {"a": "float17", "bb": "float32"}})
    by_path = {p.path: p.message for p in info.value.errors}
    assert "unsupported dtype 'float17'" in by_path["/dtypes/a"]
    assert "did you mean 'b'" in by_path["/dtypes/bb"]
    with pytest.raises(ConfigError) as info:
        load_tune_config({**base, "dtypes": "int3"})
    assert paths(info.value.errors) == ["/dtypes"]


def test_shape_and_dtype_text_parsing():
    assert parse_shapes("x=4096x4096, gamma=4096,s=") == {"x": [4096, 4096], "gamma": [4096], "s": []}
    assert parse_dtypes("bfloat16") == "bfloat16"
    assert parse_dtypes("x=bf16,y=float32") == {"x": "bf16", "y": "float32"}
    for bad in ("4096x4096", "x=40a6", "", "=3"):
        with pytest.raises(InvalidArgumentError, match="NAME=D0xD1"):
            parse_shapes(bad)
    with pytest.raises(InvalidArgumentError, match="NAME=DTYPE"):
        parse_dtypes("x=,y=float32")


def test_bad_cli_text_becomes_a_config_error():
    with pytest.raises(ConfigError, match="NAME=D0xD1"):
        load_tune_config(json.loads(SEED_EXAMPLE), operator="x", shapes="oops")


param_values = st.lists(st.integers(1, 4096), min_size=1, max_size=4, unique=True)


@given(
    space=st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), param_values, min_size=1, max_size=4
    ),
    criteria=st.sampled_from(["throughput_gbps", "latency_us", "tflops"]),
    statistic=st.sampled_from(["p95", "median"]),
    iters=st.tuples(st.integers(0, 100), st.integers(1, 500)),
    budget=st.none() | st.integers(1, 1000),
    shapes=st.dictionaries(
        st.from_regex(r"[a-z]{1,4}", fullmatch=True),
        st.lists(st.integers(0, 9999), max_size=4),
        min_size=1,
        max_size=3,
    ),
)
def test_config_round_trips_through_its_dict(space, criteria, statistic, iters, budget, shapes):
    doc = {
        "tuning_space": space,
        "benchmark_criteria": criteria,
        "statistic": statistic,
        "warmup_iters": iters[0],
        "measure_iters": iters[1],
        "operator": "op",
        "shapes": shapes,
        "dtypes": "float16",
    }
    if budget is not None:
        doc.update(strategy="budgeted", max_trials=budget, seed=budget * 7)
    cfg = load_tune_config(doc)
    assert validate_tune_config(cfg.to_dict(), require_target=True) == []
    assert load_tune_config(cfg.to_dict()) == cfg
