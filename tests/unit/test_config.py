"""Config schema: friendly errors at the right pointers; the seed configs; the normalised model."""

from __future__ import annotations

import dataclasses
import json

import pytest
from jsonschema import Draft202012Validator

from pipelink.config import (
    SCHEMA,
    build_config,
    check_document,
    read_config,
    schema_text,
)
from tests.unit.config_helpers import only, stage

KNOWN = {"deform_conv2d_v2", "silu_activation", "layer_norm_v1", "relu", "add", "matmul", "layer_norm"}

SEED_34 = {
    "pipeline": [
        {
            "name": "deform_conv2d_v2",
            "library": "libdeform.so",
            "inputs": ["input_tensor", "offset_tensor", "weight_tensor"],
            "outputs": ["conv_output"],
            "constraints": {
                "stream_affinity": "same_as_previous",
                "memory_alignment": 256,
                "precision_policy": "fp16_if_supported_else_fp32",
            },
        },
        {
            "name": "silu_activation",
            "library": "libactivation.so",
            "inputs": ["conv_output"],
            "outputs": ["final_output"],
            "constraints": {"stream_affinity": "async_preload", "memory_alignment": 64},
        },
    ]
}
SEED_44 = {
    "pipeline": [
        {
            "name": "layer_norm_v1",
            "library": "./lib/liblayernorm_module.so",
            "inputs": ["input_tensor", "gamma_tensor", "beta_tensor", "eps_scalar"],
            "outputs": ["norm_output", "mean_tensor", "rstd_tensor"],
            "constraints": {"stream_affinity": "same_as_previous", "memory_alignment": 256},
        },
    ]
}


def check(doc, **kwargs):
    kwargs.setdefault("known_operators", KNOWN)
    return check_document(doc, **kwargs)


# --- the schema file -------------------------------------------------------------------------------------


def test_schema_is_valid_draft_2020_12_and_text_round_trips():
    Draft202012Validator.check_schema(SCHEMA)
    assert json.loads(schema_text()) == SCHEMA and SCHEMA["$schema"].endswith("2020-12/schema")


def _property_schemas(node, where=""):
    if isinstance(node, dict):
        for key, sub in node.get("properties", {}).items():
            yield f"{where}/properties/{key}", sub
        for key, sub in node.items():
            yield from _property_schemas(sub, f"{where}/{key}")
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            yield from _property_schemas(sub, f"{where}/{i}")


def test_every_property_has_title_and_description_for_editors():
    defs = SCHEMA["$defs"]
    for where, prop in _property_schemas(SCHEMA):
        target = defs[prop["$ref"].split("/")[-1]] if "$ref" in prop else prop
        assert prop.get("description") or target.get("description"), where
        assert prop.get("title") or target.get("title"), where


# --- seed configs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", [SEED_34, SEED_44], ids=["seed-3.4", "seed-4.4"])
def test_seed_configs_validate_unmodified(doc):
    assert check(doc) == []
    assert check(doc, known_operators=(), check_operators=True) == []  # they carry 'library'
    assert check(doc, check_operators=False) == []


# --- schema violations: the pointer and a friendly message -----------------------------------------------


def test_wrong_type_points_at_the_value():
    message = only(check({"pipeline": [{**stage(), "inputs": "x"}]}), "/pipeline/0/inputs")
    assert "must be an array" in message and "got string 'x'" in message


def test_unknown_stage_key_points_at_the_key_with_did_you_mean():
    doc = {"pipeline": [stage(constrains={"memory_alignment": 64})]}
    message = only(check(doc), "/pipeline/0/constrains")
    assert "unknown key 'constrains'" in message and "did you mean 'constraints'?" in message


def test_unknown_key_without_a_close_match_lists_allowed_keys():
    doc = {"pipeline": [stage(constraints={"zzz": 1})]}
    message = only(check(doc), "/pipeline/0/constraints/zzz")
    assert "allowed keys:" in message and "'memory_alignment'" in message


def test_top_level_typo_reports_the_key_and_the_missing_pipeline():
    problems = check({"pipline": [stage()]})
    assert "did you mean 'pipeline'?" in only(problems, "/pipline")
    assert "missing the required key 'pipeline'" in only(problems, "")


def test_bad_enum_lists_the_allowed_values():
    doc = {"pipeline": [stage(constraints={"precision_policy": "fp8"})]}
    message = only(check(doc), "/pipeline/0/constraints/precision_policy")
    assert "'fp16_if_supported_else_fp32'" in message and "'bf16'" in message and "(got 'fp8')" in message


def test_bad_stream_affinity_names_every_form_and_suggests():
    doc = {"pipeline": [stage(constraints={"stream_affinity": "same_as_prev"})]}
    message = only(check(doc), "/pipeline/0/constraints/stream_affinity")
    assert "'async_preload'" in message and '{"stream_id": N}' in message
    assert "did you mean 'same_as_previous'?" in message


def test_stream_id_object_errors_point_inside_it():
    doc = {"pipeline": [stage(constraints={"stream_affinity": {"stream_id": -1}})]}
    assert "must be >= 0 (got -1)" in only(check(doc), "/pipeline/0/constraints/stream_affinity/stream_id")
    doc = {"pipeline": [stage(constraints={"stream_affinity": {"stream": 1}})]}
    problems = check(doc)
    assert "did you mean 'stream_id'?" in only(problems, "/pipeline/0/constraints/stream_affinity/stream")
    assert "'stream_id'" in only(problems, "/pipeline/0/constraints/stream_affinity")


def test_missing_required_key_names_it():
    doc = {"pipeline": [{"name": "relu", "inputs": ["x"]}]}
    message = only(check(doc), "/pipeline/0")
    assert "missing the required key 'outputs'" in message


def test_fallback_policy_without_operator_is_reported_on_the_policy():
    doc = {"pipeline": [stage(on_error={"version": "^1"})]}
    assert "'fallback'" in only(check(doc), "/pipeline/0/on_error")


@pytest.mark.parametrize(
    ("bad", "path", "words"),
    [
        ({"sha256": "abc"}, "/pipeline/0/sha256", "64 hexadecimal"),
        ({"outputs": []}, "/pipeline/0/outputs", "at least 1 item"),
        ({"outputs": ["y", "y"]}, "/pipeline/0/outputs/1", "more than once"),
        ({"constraints": {"timeout_ms": 0}}, "/pipeline/0/constraints/timeout_ms", "must be > 0"),
        ({"constraints": {"device_affinity": "gpu0"}}, "/pipeline/0/constraints/device_affinity", "'cuda:N'"),
        ({"attrs": {"eps": None}}, "/pipeline/0/attrs/eps", "array of numbers"),
        ({"isolation": "thread"}, "/pipeline/0/isolation", "'process'"),
        ({"inputs": ["9lives"]}, "/pipeline/0/inputs/0", "starts with a letter"),
        ({"tuned": "yes"}, "/pipeline/0/tuned", "must be a boolean"),
    ],
)
def test_stage_field_violations(bad, path, words):
    message = only(check({"pipeline": [{**stage(), **bad}]}), path)
    assert words in message


def test_input_declaration_violations():
    doc = {
        "inputs": {"x": {"shape": [2, "B", -1, "1x", 2.5], "dtype": "fp16", "pin_mem": True}},
        "pipeline": [stage()],
    }
    problems = check(doc)
    assert "must be >= 0 (got -1)" in only(problems, "/inputs/x/shape/2")
    assert "dimension symbol" in only(problems, "/inputs/x/shape/3")
    assert "non-negative integer or a dimension symbol" in only(problems, "/inputs/x/shape/4")
    assert "'float16'" in only(problems, "/inputs/x/dtype")
    assert "did you mean 'pin_memory'?" in only(problems, "/inputs/x/pin_mem")


def test_empty_pipeline_and_non_object_document():
    assert "at least 1 item" in only(check({"pipeline": []}), "/pipeline")
    assert "must be an object" in only(check([stage()]), "")


def test_json_pointer_escapes_tilde_and_slash():
    doc = {"pipeline": [{**stage(), "a~b/c": 1}], "inputs": {"x/y": {}, "x": {}}}
    problems = check(doc)
    assert "unknown key 'a~b/c'" in only(problems, "/pipeline/0/a~0b~1c")
    assert "not a valid tensor name" in only(problems, "/inputs/x~1y")


# --- the model ----------------------------------------------------------------------------------------------


def test_build_config_defaults(tmp_path):
    doc = {"pipeline": [stage(), stage(inputs=["y"], outputs=["z"]), stage(inputs=["z"], outputs=["w"])]}
    assert check(doc) == []
    cfg = build_config(doc, tmp_path, None)
    assert [s.id for s in cfg.stages] == ["relu", "relu_1", "relu_2"]
    first = cfg.stages[0]
    assert (first.constraints.memory_alignment, first.constraints.stream_affinity) == (
        256,
        "same_as_previous",
    )
    assert first.on_error.kind == "fail" and first.on_error.fallback is None
    assert (first.isolation, first.tuned, first.attrs, first.library, first.path) == (
        "none",
        True,
        {},
        None,
        "/pipeline/0",
    )
    assert first.constraints.precision_policy is None and first.constraints.check_finite is False
    assert cfg.inputs is None and cfg.outputs is None and cfg.requires == {} and cfg.name == "pipeline"
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.id = "other"  # type: ignore[misc]


def test_defaulted_id_skips_explicit_ids():
    doc = {
        "pipeline": [
            stage(outputs=["a"]),
            stage("add", id="relu", outputs=["b"]),
            stage(id="relu_1", outputs=["c"]),
            stage(outputs=["d"]),
        ]
    }
    assert check(doc) == []
    assert [s.id for s in build_config(doc, ".", None).stages] == ["relu_2", "relu", "relu_1", "relu_3"]


def test_build_config_normalises_every_field(tmp_path):
    doc = {
        "name": "blk",
        "inputs": {"x": {"shape": ["B", 4], "dtype": "bfloat16", "pin_memory": True}},
        "outputs": ["y"],
        "requires": {"compute_capability": ">=8.0"},
        "pipeline": [
            stage(
                id="s",
                version="^1.2",
                sha256="a" * 64,
                attrs={"eps": 1e-5, "dims": [1, 2]},
                constraints={
                    "stream_affinity": {"stream_id": 3},
                    "timeout_ms": 5,
                    "device_affinity": "cuda:1",
                    "check_finite": True,
                },
                on_error={"fallback": "add", "version": "~1.0"},
                isolation="process",
                tuned=False,
            )
        ],
    }
    assert check(doc) == []
    cfg = build_config(doc, tmp_path, tmp_path / "blk.json")
    s = cfg.stages[0]
    assert (
        cfg.inputs["x"].shape == ("B", 4)
        and cfg.inputs["x"].dtype == "bfloat16"
        and cfg.inputs["x"].pin_memory
    )
    assert cfg.outputs == ("y",) and cfg.name == "blk" and cfg.stage("s") is s
    assert s.constraints.stream_affinity == 3 and s.constraints.timeout_ms == 5.0
    assert isinstance(s.constraints.timeout_ms, float) and s.constraints.device_affinity == "cuda:1"
    assert (s.on_error.kind, s.on_error.fallback, s.on_error.fallback_version) == ("fallback", "add", "~1.0")
    assert (s.isolation, s.tuned, s.version, s.sha256) == ("process", False, "^1.2", "a" * 64)
    assert (
        s.attrs == {"eps": 1e-5, "dims": [1, 2]}
        and s.attrs["dims"] is not doc["pipeline"][0]["attrs"]["dims"]
    )
    with pytest.raises(KeyError, match="no stage with id 'nope'; stages: s"):
        cfg.stage("nope")


def test_resolve_library_is_relative_to_the_config_file(tmp_path, monkeypatch):
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "p.json").write_text(
        json.dumps(
            SEED_44
            | {
                "pipeline": [
                    *SEED_44["pipeline"],
                    stage("silu_activation", library="/opt/abs.so", inputs=["norm_output"]),
                    stage(inputs=["y"], outputs=["z"]),
                ]
            }
        )
    )
    monkeypatch.chdir(tmp_path)  # a different cwd must not matter
    cfg = build_config(*read_config("configs/p.json"))
    assert cfg.resolve_library(cfg.stages[0]) == folder.resolve() / "lib" / "liblayernorm_module.so"
    assert str(cfg.resolve_library(cfg.stages[1])) == "/opt/abs.so"
    assert cfg.resolve_library(cfg.stages[2]) is None
    assert cfg.name == "p" and cfg.source_path == folder.resolve() / "p.json"
