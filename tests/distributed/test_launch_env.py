"""The launch environment is read from what torchrun, mpirun and srun set, and refused when inconsistent.

If one failed, a process could take the wrong rank (two ranks 0 deadlock a rendezvous) or wait forever
for a meeting point nobody named.
"""

from __future__ import annotations

import pytest

from pipelink.distributed import LaunchEnv, launch_env
from pipelink.errors import ErrorCode, PipeLinkError

MASTER = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


def test_a_lone_process_is_rank_zero_of_one():
    assert launch_env({}) == LaunchEnv()
    assert not launch_env({}).is_distributed


@pytest.mark.parametrize(
    ("variables", "launcher"),
    [
        ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, "torchrun"),
        (
            {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
            "mpirun",
        ),
        ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}, "srun"),
    ],
)
def test_each_launcher(variables, launcher):
    env = launch_env({**variables, **MASTER})
    assert env == LaunchEnv(3, 4, 1, "10.0.0.1", 29500, launcher)
    assert env.is_distributed


def test_torchrun_wins_over_the_scheduler_around_it():
    """srun starting torchrun: the variables torchrun set for its worker are the worker's rank."""
    env = launch_env({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", **MASTER})
    assert (env.rank, env.world_size, env.launcher) == (1, 2, "torchrun")


def test_local_rank_defaults_to_the_rank():
    assert launch_env({"RANK": "1", "WORLD_SIZE": "2", **MASTER}).local_rank == 1


@pytest.mark.parametrize(
    ("variables", "words"),
    [
        ({"RANK": "x", "WORLD_SIZE": "2", **MASTER}, "RANK='x' must be an integer"),
        ({"RANK": "2", "WORLD_SIZE": "2", **MASTER}, "must lie in [0, WORLD_SIZE=2)"),
        ({"RANK": "0", "WORLD_SIZE": "0", **MASTER}, "must lie in [0, WORLD_SIZE=0)"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR/MASTER_PORT are not set"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "p"}, "MASTER_PORT='p'"),
    ],
)
def test_inconsistent_environments_are_refused(variables, words):
    with pytest.raises(PipeLinkError) as info:
        launch_env(variables)
    assert info.value.code == ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT
    assert words in info.value.message
