"""Config semantic rules (README.md, "What is checked where"): dataflow order, cycles, ids, names,
alignment, operators."""

from __future__ import annotations

import copy

import pytest

from pipelink.config import check_warnings
from pipelink.errors import ErrorCode
from tests.unit.config_helpers import check, only, paths, stage

# --- semantic rules ----------------------------------------------------------------------------------------


def test_unknown_tensor_with_declared_inputs_gets_did_you_mean():
    doc = {
        "inputs": {"input_tensor": {}},
        "pipeline": [
            stage(inputs=["input_tensor"], outputs=["conv_output"]),
            stage(inputs=["conv_ouptut"], outputs=["out"]),
        ],
    }
    message = only(check(doc), "/pipeline/1/inputs/0")
    assert "unknown tensor 'conv_ouptut'" in message and "did you mean 'conv_output'?" in message
    assert check_warnings(doc) == []


def test_resembling_external_name_is_only_a_warning_without_declared_inputs():
    doc = {"pipeline": [stage(inputs=["x"], outputs=["conv_output"]), stage(inputs=["conv_ouptut"])]}
    assert check(doc) == []
    warnings = check_warnings(doc)
    assert paths(warnings) == ["/pipeline/1/inputs/0"]
    assert "did you mean 'conv_output'" in warnings[0].message and "stage 'relu'" in warnings[0].message


def test_use_before_produce_names_the_later_stage():
    doc = {
        "pipeline": [stage(id="a", inputs=["h"], outputs=["y"]), stage(id="b", inputs=["x"], outputs=["h"])]
    }
    message = only(check(doc), "/pipeline/0/inputs/0")
    assert message == (
        "tensor 'h' is produced by stage 'b' (/pipeline/1), which runs after this stage; "
        "list stages in dependency order"
    )


def test_cycle_is_named():
    doc = {
        "pipeline": [
            stage(id="a", inputs=["x", "g"], outputs=["h"]),
            stage(id="b", inputs=["h"], outputs=["g"]),
        ]
    }
    problems = check(doc)
    assert "cycle: a -> b -> a" in only(problems, "/pipeline/0")
    assert "produced by stage 'b'" in only(problems, "/pipeline/0/inputs/1")


def test_three_stage_cycle_and_self_loop():
    doc = {
        "pipeline": [
            stage(id="a", inputs=["t3"], outputs=["t1"]),
            stage(id="b", inputs=["t1"], outputs=["t2"]),
            stage(id="c", inputs=["t2"], outputs=["t3"]),
            stage(id="d", inputs=["t4"], outputs=["t4"]),
        ]
    }
    problems = check(doc)
    assert "cycle: a -> b -> c -> a" in only(problems, "/pipeline/0")
    assert "cycle: d -> d" in only(problems, "/pipeline/3")
    assert "which it produces itself" in only(problems, "/pipeline/3/inputs/0")


def test_linear_and_diamond_pipelines_have_no_cycle():
    doc = {
        "pipeline": [
            stage(id="a", inputs=["x"], outputs=["p"]),
            stage(id="b", inputs=["p"], outputs=["q"]),
            stage(id="c", inputs=["p"], outputs=["r"]),
            stage("add", id="d", inputs=["q", "r"], outputs=["s"]),
        ]
    }
    assert check(doc) == []


def test_duplicate_explicit_id():
    doc = {"pipeline": [stage(id="s", outputs=["a"]), stage(id="s", outputs=["b"])]}
    message = only(check(doc), "/pipeline/1/id")
    assert "duplicate stage id 's'" in message and "/pipeline/0" in message


def test_defaulted_ids_never_collide():
    doc = {"pipeline": [stage(outputs=["a"]), stage(outputs=["b"]), stage(id="relu_1", outputs=["c"])]}
    assert check(doc) == []


def test_tensor_produced_twice_or_also_declared():
    doc = {
        "inputs": {"x": {}, "y": {}},
        "pipeline": [stage(outputs=["h"]), stage(outputs=["h"]), stage(outputs=["y"])],
    }
    problems = check(doc)
    assert "already produced by stage 'relu' (/pipeline/0)" in only(problems, "/pipeline/1/outputs/0")
    assert "declared as an external input (/inputs/y)" in only(problems, "/pipeline/2/outputs/0")


def test_outputs_must_be_produced_or_declared():
    doc = {"inputs": {"x": {}}, "outputs": ["y", "x", "yy_out"], "pipeline": [stage(outputs=["y_out"])]}
    problems = check(doc)
    assert paths(problems) == ["/outputs/0", "/outputs/2"]
    assert "did you mean 'y_out'?" in only(problems, "/outputs/2")


@pytest.mark.parametrize(
    ("value", "ok"),
    [(48, False), (16, False), (0, False), (-64, False), (32, True), (64, True), (512, True), (4096, True)],
)
def test_memory_alignment_power_of_two_at_least_32(value, ok):
    problems = check({"pipeline": [stage(constraints={"memory_alignment": value})]})
    if ok:
        assert problems == []
    else:
        message = only(problems, "/pipeline/0/constraints/memory_alignment")
        assert message.startswith(f"memory_alignment must be a power of two >= 32 (got {value})")


def test_alignment_of_the_wrong_type_is_reported_once():
    problems = check({"pipeline": [stage(constraints={"memory_alignment": "48"})]})
    assert "must be an integer" in only(problems, "/pipeline/0/constraints/memory_alignment")


def test_unknown_operator_and_fallback_with_did_you_mean():
    doc = {
        "pipeline": [
            stage("layer_nrom", on_error={"fallback": "reluu"}),
            stage(
                "deform_conv2d_v3",
                library="lib.so",
                inputs=["y"],
                outputs=["z"],
                on_error={"fallback": "whatever"},
            ),
        ]
    }
    problems = check(doc)
    assert paths(problems) == ["/pipeline/0/name", "/pipeline/0/on_error/fallback"]
    assert "unknown operator 'layer_nrom'; did you mean 'layer_norm'?" in problems[0].message
    assert "did you mean 'relu'?" in problems[1].message
    assert check(doc, check_operators=False) == []


def test_unknown_operator_without_match_lists_known_ones():
    message = only(check({"pipeline": [stage("qqq")]}, known_operators=["relu", "add"]), "/pipeline/0/name")
    assert "known operators: add, relu" in message


@pytest.mark.parametrize("spec", [">=1.2,<2", "^1.2", "~1.2", "1.2.3", "==1.*"])
def test_valid_version_specifiers(spec):
    assert check({"pipeline": [stage(version=spec, on_error={"fallback": "add", "version": spec})]}) == []


def test_invalid_version_specifiers():
    doc = {
        "requires": {"compute_capability": "^8.0"},
        "pipeline": [stage(version=">=1.2 <2", on_error={"fallback": "add", "version": "latest"})],
    }
    problems = check(doc)
    assert paths(problems) == [
        "/pipeline/0/version",
        "/pipeline/0/on_error/version",
        "/requires/compute_capability",
    ]
    assert "'>=1.2 <2'" in problems[0].message and "'latest'" in problems[1].message
    assert all(p.code is ErrorCode.PIPELINK_ERR_INVALID_CONFIG for p in problems)


def test_requires_block():
    ok = {
        "requires": {
            "compute_capability": ">=8.0",
            "features": ["tensor_core", {"feature": "tensor_core", "minimum": 8}],
        },
        "pipeline": [stage()],
    }
    assert check(ok) == []
    bad = copy.deepcopy(ok)
    bad["requires"]["features"][0] = "tensorcore"
    assert "did you mean 'tensor_core'?" in only(check(bad), "/requires/features/0")


def test_all_problems_are_reported_at_once():
    doc = {
        "inputs": {"x": {}},
        "pipeline": [
            stage("relu", inputs=["x"], outputs=["h"], constrains={}),
            stage("reluu", inputs=["hh"], outputs=["y"], constraints={"memory_alignment": 48}),
            stage("add", id="relu", inputs=["later"], outputs=["z"]),
            stage("add", id="relu", inputs=["x"], outputs=["later"]),
        ],
    }
    problems = check(doc)
    assert {
        "/pipeline/0/constrains",
        "/pipeline/1/name",
        "/pipeline/1/inputs/0",
        "/pipeline/1/constraints/memory_alignment",
        "/pipeline/2/inputs/0",
        "/pipeline/3/id",
    } <= set(paths(problems))


def test_structurally_broken_stage_does_not_cascade():
    # Stage 0 lacks 'outputs': its consumer's "unknown tensor" would be noise, so only the real error shows.
    doc = {"inputs": {"x": {}}, "pipeline": [{"name": "relu", "inputs": ["x"]}, stage(inputs=["h"])]}
    assert paths(check(doc)) == ["/pipeline/0"]


def test_different_words_sharing_a_suffix_are_not_typos():
    # The seed's own config reads beta_tensor and produces mean_tensor: no warning for that.
    doc = {"pipeline": [stage(inputs=["x", "beta_tensor"], outputs=["mean_tensor"])]}
    assert check_warnings(doc) == []
