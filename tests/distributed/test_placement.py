"""device_affinity is honoured or refused at load, at its JSON pointer, never ignored.

If one failed, a stage asking for a GPU (or for a device that does not exist) would silently run on the
pipeline's device, as it did before issue 15.
"""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.backends import get_backend
from pipelink.config import build_config, read_config
from pipelink.errors import ErrorCode, InvalidArgumentError, PipeLinkError
from pipelink.graph.linker import link
from pipelink.graph.placement import Affinity, parse_affinity, placement_problems
from pipelink.hardware import HardwareInfo
from pipelink.modules.registry import registry

POINTER = "/pipeline/1/constraints/device_affinity"


def _config(affinity: str) -> dict:
    return {
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "pipeline": [
            {"name": "relu", "inputs": ["x"], "outputs": ["h"]},
            {
                "name": "sigmoid",
                "inputs": ["h"],
                "outputs": ["y"],
                "constraints": {"device_affinity": affinity},
            },
        ],
    }


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("cpu", Affinity("cpu")),
        ("cuda", Affinity("cuda")),
        ("gpu", Affinity("cuda")),
        ("cuda:0", Affinity("cuda", (0,))),
        ("gpu:3", Affinity("cuda", (3,))),
        ("gpu:1,2", Affinity("cuda", (1, 2))),
        ("CUDA:2,0", Affinity("cuda", (2, 0))),
    ],
)
def test_parse_affinity(text, parsed):
    assert parse_affinity(text) == parsed
    assert parse_affinity(text).is_replicated == (len(parsed.indices) > 1)


@pytest.mark.parametrize("text", ["gpu0", "gpu:", "gpu:1,", "cpu:0", "gpu:1,1", "tpu:0", "cuda:-1"])
def test_parse_affinity_refuses(text):
    with pytest.raises(InvalidArgumentError, match="device_affinity"):
        parse_affinity(text)


@pytest.mark.parametrize("affinity", ["gpu:0", "cuda:1", "gpu:1,2", "cuda"])
def test_gpu_affinity_on_the_cpu_is_refused_at_its_pointer(affinity):
    with pytest.raises(PipeLinkError) as info:
        pl.load(_config(affinity), device="cpu")
    assert info.value.code == ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED
    (problem,) = pl.validate(_config(affinity), device="cpu")
    assert problem.path == POINTER and problem.code == ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED
    assert "loaded on the CPU" in problem.message and repr(affinity) in problem.message


def test_schema_accepts_a_gpu_list_and_refuses_a_malformed_one():
    (problem,) = pl.validate(_config("gpu:1,"), device="cpu")
    assert problem.path == POINTER and problem.code == ErrorCode.PIPELINK_ERR_INVALID_CONFIG
    assert "'gpu:1,2'" in problem.message


def test_cpu_affinity_on_the_cpu_runs_there():
    pipe = pl.load(_config("cpu"), device="cpu")
    x = np.random.default_rng(0).standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(np.asarray(pipe.run(x=x)["y"]), 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)


def _problems_on(affinity: str, *, index: int, gpus: int) -> list:
    """Placement problems of the config in a process driving cuda:<index> of a host with ``gpus`` GPUs
    (the linked graph gets that device's description; nothing runs)."""
    doc, base_dir, _ = read_config(_config(affinity))
    graph, _ = link(build_config(doc, base_dir), registry, get_backend("cpu").info)  # (problems: the CPU's)
    graph.info = HardwareInfo("cuda", "test GPU", index=index)
    return placement_problems(graph, lambda: gpus)


@pytest.mark.parametrize(
    ("affinity", "index", "gpus", "words"),
    [
        ("gpu:0", 0, 1, None),
        ("cuda", 0, 1, None),
        ("gpu:0,1", 1, 2, None),  # replicated: this process (cuda:1) is one of the replicas
        ("gpu:1", 0, 1, "does not exist: this host has 1 GPU(s)"),
        ("gpu:0,1", 0, 1, "names cuda:1, which does not exist"),
        ("gpu:1", 0, 2, "does not include cuda:0"),
        ("cpu", 0, 1, "loaded on cuda:0"),
    ],
)
def test_gpu_affinity_against_the_process_device(affinity, index, gpus, words):
    problems = _problems_on(affinity, index=index, gpus=gpus)
    if words is None:
        assert problems == []
        return
    assert len(problems) == 1 and problems[0].path == POINTER
    assert problems[0].code == ErrorCode.PIPELINK_ERR_HARDWARE_UNSUPPORTED
    assert words in problems[0].message
