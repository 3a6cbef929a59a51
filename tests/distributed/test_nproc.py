"""``pipelink run --nproc N`` hands the same command to torchrun, and refuses what cannot work.

If one failed, --nproc would start processes that do not know their rank, run the launcher inside a
launched world (N x N processes), or write every rank's outputs to one file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pipelink.cli import main
from pipelink.distributed import LaunchEnv
from pipelink.distributed.launch import check_not_launched, launcher_command, without_option
from pipelink.errors import PipeLinkError

from .harness import launch_env as world_env


@pytest.mark.parametrize(
    "args",
    [
        ["run", "p.json", "--nproc", "2", "--random"],
        ["run", "p.json", "--nproc=2", "--random"],
        ["run", "--nproc", "2", "p.json", "--random"],
    ],
)
def test_the_launched_command_is_the_same_without_nproc(args):
    assert without_option(args, "--nproc") in (["run", "p.json", "--random"],)


def test_launcher_command_is_torchrun_standalone():
    cmd = launcher_command(3, ["run", "p.json"])
    assert cmd[:4] == [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    assert "--nproc-per-node=3" in cmd and cmd[-4:] == ["-m", "pipelink", "run", "p.json"]


def test_nproc_inside_a_launched_world_is_a_usage_error(tmp_path, monkeypatch, capsys):
    for name, value in world_env(0, 2, 29500).items():
        monkeypatch.setenv(name, value)
    cfg = tmp_path / "p.json"
    cfg.write_text(json.dumps({"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]}))
    assert main(["run", str(cfg), "--nproc", "2"]) == 2
    assert "torchrun already started" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        (LaunchEnv(), False),
        (LaunchEnv(0, 1, 0, launcher="srun"), False),  # one task of a Slurm allocation may start a world
        (LaunchEnv(0, 1, 0, launcher="torchrun"), True),  # torchrun inside torchrun
        (LaunchEnv(1, 2, 1, "h", 1, launcher="mpirun"), True),
    ],
)
def test_only_a_process_outside_a_world_starts_one(env, refused):
    if refused:
        with pytest.raises(PipeLinkError, match="leave --nproc out"):
            check_not_launched(env, 2)
    else:
        check_not_launched(env, 2)


def test_nproc_below_one_is_a_usage_error(tmp_path, capsys):
    assert main(["run", str(tmp_path / "p.json"), "--nproc", "0"]) == 2
    assert "--nproc must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("PIPELINK_LONG"), reason="starts torchrun: set PIPELINK_LONG=1")
def test_nproc_two_runs_every_rank_and_writes_one_file_each(tmp_path):
    pytest.importorskip("torch.distributed")
    cfg = tmp_path / "p.json"
    cfg.write_text(
        json.dumps(
            {
                "inputs": {"x": {"shape": [2, 3], "dtype": "float32"}},
                "pipeline": [{"name": "all_gather", "inputs": ["x"], "outputs": ["g"]}],
            }
        )
    )
    out = tmp_path / "out.npz"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelink",
            "run",
            str(cfg),
            "--random",
            "--device",
            "cpu",
            "--nproc",
            "2",
            "-o",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(rank 0 of 2)" in proc.stdout and "(rank 1 of 2)" in proc.stdout
    g0, g1 = (np.load(tmp_path / f"out.rank{r}.npz")["g"] for r in (0, 1))
    np.testing.assert_array_equal(g0, g1)
    assert g0.shape == (4, 3) and not np.array_equal(g0[:2], g0[2:])  # each rank drew its own x
