"""`neox-epoch check-batch` against real DeepSpeed 0.19: the world it predicts is the world the launcher starts.

* A matrix of launcher flags (hostfiles written in tmp_path; multi-node ones only parsed): the world and
  hosts check-batch computes equal both a literal expectation and what DeepSpeed's own code produces
  (``runner.main`` with the process start captured, or a backend's ``get_cmd``), and launcher refusals
  come back as DeepSpeed's own message, exit 2.
* NeoX's own GPU count versus the launcher's world (the disagreements from the notes).
* The batch derivation equals ``DeepSpeedConfig``'s own ``_configure_train_batch_size`` for a grid of inputs.
* Bad input exits 2 with one line on stderr and no traceback; ``--fix`` output re-checks as consistent.
* A few real ``deepspeed --num_gpus N`` launches on CPU: ranks started == check-batch's prediction, and the
  fixed config passes ``deepspeed.initialize`` where the original fails.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optional
import pytest

optional.require("deepspeed")  # every test here compares with DeepSpeed's own code
os.environ.setdefault("DS_ACCELERATOR", "cpu")  # device_count() = $LOCAL_SIZE, as the launch tests need

from neox_epoch.batch.check import (  # noqa: E402
    REMOVED_TOP_LEVEL_KEYS,
    REMOVED_ZERO_KEYS,
    batch_errors,
    derive_batch,
)
from neox_epoch.batch.config import LauncherSettings, read_config  # noqa: E402
from neox_epoch.batch.deepspeed_import import deepspeed_runner, import_deepspeed  # noqa: E402
from neox_epoch.batch.fix import consistent_micro_and_accumulation  # noqa: E402
from neox_epoch.batch.guard import check_world  # noqa: E402
from neox_epoch.batch.neox_count import neox_gpu_count  # noqa: E402
from neox_epoch.batch.preflight import preflight  # noqa: E402
from neox_epoch.batch.world import launcher_world  # noqa: E402
from neox_epoch.cli import main  # noqa: E402
from neox_epoch.errors import BatchError, ConfigError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = os.path.join(ROOT, "tests", "helpers", "ds_rank_probe.py")
runner = deepspeed_runner()  # imported at collection so DeepSpeed's log handler binds a session-long stream
DS_CONFIG = import_deepspeed("deepspeed.runtime.config")
LAUNCH_ENV = ("LOCAL_SIZE", "CUDA_VISIBLE_DEVICES", "DLTS_HOSTFILE", "MASTER_ADDR")


@pytest.fixture(autouse=True)
def clean_launcher_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher reads LOCAL_SIZE (CPU device count), CUDA_VISIBLE_DEVICES, DLTS_HOSTFILE, MASTER_ADDR."""
    for name in LAUNCH_ENV:
        monkeypatch.delenv(name, raising=False)
    if os.path.exists(runner.DLTS_HOSTFILE):
        pytest.skip(f"{runner.DLTS_HOSTFILE} exists on this machine: the no-hostfile cases would read it")


def run_cli(args: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    """Exit 2, exactly one stderr line in the CLI's format, no traceback, and the given words in it."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, err
    assert lines[0].startswith("neox-epoch check-batch: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def write(path: Any, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def ds_json(tmp_path: Any, name: str = "ds.json", **keys: Any) -> str:
    return write(tmp_path / name, json.dumps(keys))


def neox_yml(tmp_path: Any, name: str = "neox.yml", **keys: Any) -> str:
    import yaml

    return write(tmp_path / name, yaml.safe_dump(keys, sort_keys=False))


# ---------------------------------------------------------------------------------------------------------
# DeepSpeed's own answer, for comparison


class _Started:
    """Stands in for the launched process inside runner.main: records the command, starts nothing."""

    commands: list[list[str]] = []

    def __init__(self, cmd: list[str], env: Any = None) -> None:
        _Started.commands.append(list(cmd))
        self.returncode = 0

    def wait(self) -> int:
        return 0


def deepspeed_main_world(argv: Sequence[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Run DeepSpeed's real ``runner.main`` and decode the ``--world_info`` of the command it would start.

    ``--no_ssh --node_rank 0 --no_ssh_check --master_addr`` keep it from ssh-ing to the hostfile's hosts and
    from needing pdsh; they do not change the resources it resolves (the world_info carries every host).
    """
    _Started.commands = []
    monkeypatch.setattr(runner.subprocess, "Popen", _Started)
    extra = ["--no_ssh", "--node_rank", "0", "--no_ssh_check", "--master_addr", "127.0.0.1"]
    with monkeypatch.context() as m:  # runner.main deletes CUDA_VISIBLE_DEVICES: keep the test's env intact
        m.setattr(os, "environ", dict(os.environ))
        runner.main([*extra, *argv, "train.py"])
    (cmd,) = _Started.commands
    info = next(a for a in cmd if a.startswith("--world_info="))
    return json.loads(base64.urlsafe_b64decode(info.split("=", 1)[1]))


def deepspeed_backend_world(argv: Sequence[str]) -> int:
    """World of an MPI-style or slurm backend: the ``-n``/``-np`` of the command its ``get_cmd`` builds."""
    args = runner.parse_args([*argv, "train.py"])
    pool = runner.fetch_hostfile(args.hostfile)
    active = runner.parse_inclusion_exclusion(pool, args.include, args.exclude)
    active = runner.apply_num_nodes_and_gpus(active, args.num_nodes, args.num_gpus)
    cls = runner.LAUNCHER_CLASSES[args.launcher]
    cmd = cls(args, "", pool).get_cmd(dict(os.environ), active)
    flag = "-n" if "-n" in cmd else "-np"
    return int(cmd[cmd.index(flag) + 1])


# ---------------------------------------------------------------------------------------------------------
# launcher-flag matrix

HOSTFILES = {
    "2x8": "node1 slots=8\nnode2 slots=8\n",
    "2x4": "node1 slots=4\nnode2 slots=4\n",
    "8+4": "node1 slots=8\nnode2 slots=4\n",
    "4+2+2": "# three hosts\nnode1 slots=4\n\nnode2 slots=2\nnode3 slots=2\n",
    "local3": "localhost slots=3\n",
}

# (id, hostfile key or None, flags, env, expected world, expected hosts)
LOCAL_CASES: list[tuple[str, str | None, list[str], dict[str, str], int, dict[str, list[int]]]] = [
    ("no-flags-8-devices", None, [], {"LOCAL_SIZE": "8"}, 8, {"localhost": list(range(8))}),
    ("num_gpus-2-of-8", None, ["--num_gpus", "2"], {"LOCAL_SIZE": "8"}, 2, {"localhost": [0, 1]}),
    ("num_gpus-4-of-2-ignores-count", None, ["--num_gpus", "4"], {"LOCAL_SIZE": "2"}, 4, {"localhost": [0, 1, 2, 3]}),
    ("include-slots", None, ["--include", "localhost:1,3"], {"LOCAL_SIZE": "4"}, 2, {"localhost": [1, 3]}),
    ("exclude-slot", None, ["--exclude", "localhost:0"], {"LOCAL_SIZE": "4"}, 3, {"localhost": [1, 2, 3]}),
    (
        "visible-devices-become-include",
        None,
        [],
        {"LOCAL_SIZE": "4", "CUDA_VISIBLE_DEVICES": "0,1"},
        2,
        {"localhost": [0, 1]},
    ),
    (
        "visible-devices-ignored-with-num_gpus",
        None,
        ["--num_gpus", "3"],
        {"LOCAL_SIZE": "4", "CUDA_VISIBLE_DEVICES": "0,1"},
        3,
        {"localhost": [0, 1, 2]},
    ),
    ("num_nodes-1-local", None, ["--num_nodes", "1"], {"LOCAL_SIZE": "2"}, 2, {"localhost": [0, 1]}),
    ("hostfile-2x8", "2x8", [], {}, 16, {"node1": list(range(8)), "node2": list(range(8))}),
    ("hostfile-2x8-num_nodes-1", "2x8", ["--num_nodes", "1"], {}, 8, {"node1": list(range(8))}),
    ("hostfile-2x8-num_gpus-4", "2x8", ["--num_gpus", "4"], {}, 8, {"node1": [0, 1, 2, 3], "node2": [0, 1, 2, 3]}),
    ("hostfile-2x8-include-2-slots", "2x8", ["--include", "node1:0,1"], {}, 2, {"node1": [0, 1]}),
    (
        "hostfile-2x8-include-host-and-slot",
        "2x8",
        ["--include", "node1@node2:0"],
        {},
        9,
        {"node1": list(range(8)), "node2": [0]},
    ),
    ("hostfile-2x8-exclude-host", "2x8", ["--exclude", "node2"], {}, 8, {"node1": list(range(8))}),
    (
        "hostfile-2x8-exclude-slots",
        "2x8",
        ["--exclude", "node1:0,1@node2:7"],
        {},
        13,
        {"node1": list(range(2, 8)), "node2": list(range(7))},
    ),
    (
        "hostfile-2x4-num_gpus-8-ignores-slots",
        "2x4",
        ["--num_gpus", "8"],
        {},
        16,
        {"node1": list(range(8)), "node2": list(range(8))},
    ),
    (
        "hostfile-3-hosts-num_nodes-2-num_gpus-1",
        "4+2+2",
        ["--num_nodes", "2", "--num_gpus", "1"],
        {},
        2,
        {"node1": [0], "node2": [0]},
    ),
    ("hostfile-localhost-3", "local3", [], {}, 3, {"localhost": [0, 1, 2]}),
    ("hostfile-localhost-exclude", "local3", ["--exclude", "localhost:1"], {}, 2, {"localhost": [0, 2]}),
    (
        "hostfile-ignores-visible-devices",
        "2x4",
        [],
        {"CUDA_VISIBLE_DEVICES": "0"},
        8,
        {"node1": [0, 1, 2, 3], "node2": [0, 1, 2, 3]},
    ),
]


def _materialize(tmp_path: Any, hostfile: str | None, flags: list[str]) -> list[str]:
    if hostfile is None:
        return ["--hostfile", str(tmp_path / "no-such-hostfile"), *flags]
    return ["--hostfile", write(tmp_path / "hostfile", HOSTFILES[hostfile]), *flags]


@pytest.mark.parametrize(
    ("hostfile", "flags", "env", "world", "hosts"), [c[1:] for c in LOCAL_CASES], ids=[c[0] for c in LOCAL_CASES]
)
def test_world_matches_deepspeed_runner_main(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hostfile: str | None,
    flags: list[str],
    env: dict[str, str],
    world: int,
    hosts: dict[str, list[int]],
) -> None:
    """check-batch's world is the one runner.main resolves (same rules, same order) for each flag set."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = _materialize(tmp_path, hostfile, flags)
    ours = launcher_world(argv)
    assert ours.world_size == world
    assert ours.hosts == hosts
    assert deepspeed_main_world(argv, monkeypatch) == hosts
    assert ours.deepspeed_version == import_deepspeed("deepspeed").__version__


@pytest.mark.parametrize(
    ("hostfile", "flags", "world"),
    [
        ("2x8", ["--launcher", "openmpi"], 16),
        ("8+4", ["--launcher", "openmpi"], 12),
        ("2x8", ["--launcher", "mpich"], 16),
        ("2x8", ["--launcher", "slurm", "--num_gpus", "4"], 8),
        ("2x8", ["--launcher", "slurm", "--exclude", "node2"], 8),
    ],
)
def test_multinode_backend_world_matches_its_get_cmd(
    tmp_path: Path,
    hostfile: str | None,
    flags: list[str],
    world: int,
) -> None:
    """MPI-style backends start sum(hostfile slots) ranks; slurm the filtered ones: as their get_cmd says."""
    argv = _materialize(tmp_path, hostfile, flags)
    ours = launcher_world(argv)
    assert ours.world_size == world
    if "--exclude" in flags:  # one host left: runner.main takes the local path, never the backend
        assert ours.backend == "local"
    else:
        assert ours.backend == flags[1]
        assert deepspeed_backend_world(argv) == world


REFUSALS = [
    (
        "include-and-num_gpus",
        "2x8",
        ["--include", "node1:0", "--num_gpus", "2"],
        {},
        "Cannot specify num_nodes/gpus with include/exclude",
    ),
    ("unknown-host", "2x8", ["--include", "node3"], {}, "Hostname 'node3' not found in hostfile"),
    ("unknown-slot", "2x8", ["--include", "node1:9"], {}, "No slot '9' specified on host 'node1'"),
    (
        "cpu-include-two-slots",
        None,
        ["--include", "localhost:0,1"],
        {"LOCAL_SIZE": "1"},
        "No slot '1' specified on host 'localhost'",
    ),
    (
        "num_nodes-without-hostfile",
        None,
        ["--num_nodes", "2"],
        {"LOCAL_SIZE": "2"},
        "Num nodes is >1 but no extra nodes available via hostfile",
    ),
    (
        "slurm-slot-selection",
        "2x8",
        ["--launcher", "slurm", "--include", "node1:1,2@node2"],
        {},
        "slurm backend cannot select specific device ids",
    ),
]


@pytest.mark.parametrize(
    ("hostfile", "flags", "env", "message"), [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS]
)
def test_launcher_refusals_are_deepspeeds_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    hostfile: str | None,
    flags: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    """What runner.main refuses, check-batch refuses with DeepSpeed's words, one line, exit 2."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = _materialize(tmp_path, hostfile, flags)
    with pytest.raises((ValueError, RuntimeError), match=message.replace("(", r"\(").replace(")", r"\)")):
        deepspeed_main_world(argv, monkeypatch)
    config = ds_json(tmp_path, train_batch_size=16)
    code, _, err = run_cli(["check-batch", config, *argv], capsys)
    assert_one_line_error(code, err, message, "refuses the flags")


@pytest.mark.parametrize(
    ("hostfile", "flags", "message"),
    [
        ("2x8", ["--launcher", "openmpi", "--exclude", "node1:0"], "openmpi backend does not support worker include"),
        ("8+4", ["--launcher", "mpich"], "MPICH requires same number of devices per node"),
        ("2x8", ["--launcher", "nosuch"], "Unknown launcher nosuch"),
    ],
)
def test_backend_refusals_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    hostfile: str | None,
    flags: list[str],
    message: str,
) -> None:
    """Backend rules (validate_args, equal slots, unknown name) refuse before anything starts."""
    argv = _materialize(tmp_path, hostfile, flags)
    code, _, err = run_cli(["check-batch", ds_json(tmp_path, train_batch_size=16), *argv], capsys)
    assert_one_line_error(code, err, message)


def test_bad_hostfile_line_is_deepspeeds_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = write(tmp_path / "hf", "node1 slots=8\nnode2 gpus=8\n")
    code, _, err = run_cli(["check-batch", ds_json(tmp_path, train_batch_size=16), "-H", hostfile], capsys)
    assert_one_line_error(code, err, "Hostfile contains a bad entry: node2 gpus=8")


# ---------------------------------------------------------------------------------------------------------
# NeoX's count versus the launcher's world


def test_neox_include_with_num_gpus_counts_4_launcher_starts_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Notes [ran]: hostfile 2x8 + include node1:0,1 + num_gpus 4 -> NeoX assumes 4, the launcher starts 2
    (deepy drops --num_gpus when include is set). The batch NeoX derives for 4 fails DeepSpeed's check on 2."""
    hostfile = write(tmp_path / "hostfile", HOSTFILES["2x8"])
    config = neox_yml(
        tmp_path,
        train_batch_size=32,
        train_micro_batch_size_per_gpu=4,
        gradient_accumulation_steps=2,
        hostfile=hostfile,
        include="node1:0,1",
        num_gpus=4,
    )
    result = preflight([config])
    assert result.neox is not None and result.neox.count == 4
    assert result.launch.world_size == 2 and result.launch.hosts == {"node1": [0, 1]}
    assert not result.consistent
    code, out, err = run_cli(["check-batch", config], capsys)
    assert_one_line_error(
        code,
        err,
        "NeoX counted 4 GPUs",
        "launcher starts 2",
        "deepy drops --num_gpus 4",
        "gradient_accumulation_steps 2 -> 4",
        "global_num_gpus",
        "--fix",
    )
    assert "dp = world / (pp * mp) = 2 / (1 * 1) = 2" in out
    assert "NeoX: train_batch_size = micro * grad_accum * dp = 4 * 2 * 4 = 32" in out


def test_neox_no_hostfile_counts_cuda_devices_not_num_gpus(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Notes [ran]: no hostfile + num_gpus=2 on an 8-GPU box -> NeoX assumes 8 (torch.cuda.device_count()),
    the launcher starts 2. The box is emulated: LOCAL_SIZE=8 for DeepSpeed's CPU accelerator, and torch's
    CUDA count set to 8 (torch, not DeepSpeed, is what is stubbed)."""
    import torch

    monkeypatch.setenv("LOCAL_SIZE", "8")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    config = neox_yml(tmp_path, train_batch_size=64, train_micro_batch_size_per_gpu=8, num_gpus=2)
    code, out, err = run_cli(["check-batch", config], capsys)
    assert_one_line_error(
        code,
        err,
        "NeoX counted 8 GPUs with torch.cuda.device_count() because there is no hostfile",
        "while the launcher starts 2",
        "--num_gpus 2",
    )
    assert "world       2 processes" in out
    # tbs 64 = 8 * 1 * 8 holds for NeoX; the workers get tbs 64, mbs 8 and no gas (NeoX omits its default 1),
    # so DeepSpeed silently re-derives gas = 64 // 8 // 2 = 4 while NeoX's loop keeps 1
    assert "silently re-derives gradient_accumulation_steps = train_batch_size // micro // dp = 64 // 8 // 2 = 4" in err


def test_neox_count_function_cases(tmp_path: Path) -> None:
    """NeoX's count: hostfile slots, num_gpus * hosts (ignoring slots), num_nodes, CUDA count without hostfile."""
    hostfile = write(tmp_path / "hostfile", HOSTFILES["2x4"])
    assert neox_gpu_count(LauncherSettings(hostfile=hostfile)).count == 8
    assert neox_gpu_count(LauncherSettings(hostfile=hostfile, num_gpus=8)).count == 16
    assert neox_gpu_count(LauncherSettings(hostfile=hostfile, num_nodes=1)).count == 4
    assert neox_gpu_count(LauncherSettings(hostfile=hostfile, exclude="node2:0")).count == 7
    assert neox_gpu_count(LauncherSettings(hostfile=hostfile, include="node2:0", num_gpus=4)).count == 4
    assert neox_gpu_count(LauncherSettings(num_gpus=2), cuda_device_count=8).count == 8
    assert neox_gpu_count(LauncherSettings(), global_num_gpus=3).count == 3


@pytest.mark.parametrize(
    ("keys", "flags"),
    [
        ({"num_gpus": 8}, []),  # both: num_gpus * hosts, slots ignored
        ({"include": "node1:0,1@node2:3"}, []),  # both: the included slots
        ({"num_nodes": 1}, []),
        ({}, ["--exclude", "node2"]),  # command-line flag overrides / adds to the config
    ],
)
def test_neox_agrees_with_launcher(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    keys: dict[str, Any],
    flags: list[str],
) -> None:
    """When NeoX's count equals the launcher's world a consistent NeoX config exits 0."""
    hostfile = write(tmp_path / "hostfile", HOSTFILES["2x4"])
    probe = preflight(
        [neox_yml(tmp_path, "probe.yml", train_micro_batch_size_per_gpu=1, hostfile=hostfile, **keys)],
        LauncherSettings(exclude=flags[1]) if flags else None,
    )
    world = probe.launch.world_size
    assert probe.neox is not None and probe.neox.count == world
    config = neox_yml(tmp_path, train_batch_size=2 * world, train_micro_batch_size_per_gpu=2, hostfile=hostfile, **keys)
    code, out, err = run_cli(["check-batch", config, *flags], capsys)
    assert code == 0, err
    assert "result      consistent" in out


def test_dlts_hostfile_overrides_config_hostfile_for_the_launcher_only(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """deepy appends --hostfile $DLTS_HOSTFILE after the config's hostfile: the launcher reads it, NeoX does not."""
    config_hostfile = write(tmp_path / "config_hostfile", HOSTFILES["2x8"])
    monkeypatch.setenv("DLTS_HOSTFILE", write(tmp_path / "dlts_hostfile", HOSTFILES["2x4"]))
    config = neox_yml(tmp_path, train_batch_size=64, train_micro_batch_size_per_gpu=4, hostfile=config_hostfile)
    code, _, err = run_cli(["check-batch", config], capsys)
    assert_one_line_error(code, err, "NeoX counted 16 GPUs", "launcher starts 8", "DLTS_HOSTFILE")


def test_global_num_gpus_in_config_replaces_neox_count(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCAL_SIZE", "2")
    config = neox_yml(
        tmp_path, train_batch_size=8, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=2, global_num_gpus=2
    )
    code, out, err = run_cli(["check-batch", config], capsys)
    assert code == 0, err
    assert "2 GPUs from global_num_gpus in the config" in out


# ---------------------------------------------------------------------------------------------------------
# derivation rules == DeepSpeedConfig's own


def deepspeed_config_batch(params: dict[str, Any], dp: int) -> tuple[int, int, int]:
    """Run DeepSpeed's own ``_configure_train_batch_size`` (derivation + assertion) for data-parallel size dp.

    DeepSpeedConfig.__init__ would look dp up from a process group; the object is created without it and
    given dp directly, then the real getters and the real derivation/assertion methods run.
    """
    c = object.__new__(DS_CONFIG.DeepSpeedConfig)
    c.world_size = dp
    c.train_batch_size = DS_CONFIG.get_train_batch_size(params)
    c.train_micro_batch_size_per_gpu = DS_CONFIG.get_train_micro_batch_size_per_gpu(params)
    c.gradient_accumulation_steps = DS_CONFIG.get_gradient_accumulation_steps(params)
    c._configure_train_batch_size()
    return c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps


BATCH_GRID = [
    {"train_batch_size": t, "train_micro_batch_size_per_gpu": m, "gradient_accumulation_steps": g}
    for t in (None, 4, 16, 18, 32)
    for m in (None, 1, 2, 3)
    for g in (None, 1, 2, 4)
]


@pytest.mark.parametrize("dp", [1, 2, 3, 4, 8])
def test_derivation_equals_deepspeed_config(dp: int) -> None:
    """For every (tbs, mbs, gas) subset on several dp: same values, and an error exactly when DeepSpeed asserts
    (with DeepSpeed's assertion text in ours): covers floors, gas rounding to 0 and the mismatch assert."""
    for raw in BATCH_GRID:
        params = {k: v for k, v in raw.items() if v is not None}
        tbs, mbs, gas = (
            raw["train_batch_size"],
            raw["train_micro_batch_size_per_gpu"],
            raw["gradient_accumulation_steps"],
        )
        if tbs is None and mbs is None:
            with pytest.raises(AssertionError, match="Either train_batch_size or train_micro_batch_size_per_gpu"):
                deepspeed_config_batch(params, dp)
            with pytest.raises(ConfigError):
                derive_batch(tbs, mbs, gas, dp)
            continue
        ours = derive_batch(tbs, mbs, gas, dp)
        errors = batch_errors(ours)
        try:
            theirs = deepspeed_config_batch(params, dp)
        except AssertionError as err:
            assert errors, (params, dp, str(err))
            first = str(err).split(" has to be")[0] if "has to be" in str(err) else "Check batch related parameters"
            assert first in errors[0], (errors[0], str(err))
            continue
        assert not errors, (params, dp, errors)
        assert (ours.train_batch_size, ours.train_micro_batch_size_per_gpu, ours.gradient_accumulation_steps) == theirs


def test_removed_key_lists_match_deepspeed() -> None:
    """Our 0.19 fallback lists are DeepSpeed's own tables (the CLI uses DeepSpeed's, with its messages)."""
    assert set(REMOVED_TOP_LEVEL_KEYS) == set(DS_CONFIG._REMOVED_TOP_LEVEL_CONFIG_KEYS)
    assert set(REMOVED_ZERO_KEYS) == set(DS_CONFIG._REMOVED_ZERO_CONFIG_KEYS)
    with pytest.raises(DS_CONFIG.DeepSpeedConfigError):
        DS_CONFIG._reject_removed_config_keys({"sparse_gradients": False})


# ---------------------------------------------------------------------------------------------------------
# the CLI: table, JSON, exit codes


JSON_KEYS = {
    "version",
    "schema",
    "world_size",
    "pipe_parallel_size",
    "model_parallel_size",
    "data_parallel_size",
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "consistent",
    "findings",
    "deepspeed_version",
    "hosts",
}


def test_consistent_table_shows_the_arithmetic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = write(tmp_path / "hostfile", HOSTFILES["2x4"])
    config = ds_json(tmp_path, train_batch_size=32, train_micro_batch_size_per_gpu=4, pipe_parallel_size=2)
    code, out, err = run_cli(["check-batch", config, "-H", hostfile], capsys)
    assert code == 0, err
    assert "dp = world / (pp * mp) = 8 / (2 * 1) = 4" in out
    assert "gradient_accumulation_steps = train_batch_size // micro // dp = 32 // 4 // 4 = 2" in out
    assert "train_batch_size = micro * grad_accum * dp = 4 * 2 * 4 = 32" in out
    assert f"deepspeed {import_deepspeed('deepspeed').__version__}" in out
    assert err == ""


def test_json_keys_and_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints exactly one object with the stable keys; stdout holds nothing else."""
    hostfile = write(tmp_path / "hostfile", HOSTFILES["2x8"])
    config = ds_json(
        tmp_path,
        train_batch_size=64,
        train_micro_batch_size_per_gpu=2,
        pipeline={"stages": 2},
        tensor_parallel={"autotp_size": 2},
    )
    code, out, err = run_cli(["check-batch", config, "-H", hostfile, "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert JSON_KEYS <= set(report)
    assert report["world_size"] == 16
    assert (report["pipe_parallel_size"], report["model_parallel_size"], report["data_parallel_size"]) == (2, 2, 4)
    assert (
        report["train_batch_size"],
        report["train_micro_batch_size_per_gpu"],
        report["gradient_accumulation_steps"],
    ) == (64, 2, 8)
    assert report["consistent"] is True and report["findings"] == []
    assert report["hosts"] == {"node1": list(range(8)), "node2": list(range(8))}
    assert report["deepspeed_version"] == import_deepspeed("deepspeed").__version__


def test_json_of_an_inconsistent_config_then_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = ds_json(tmp_path, train_batch_size=12, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=2)
    code, out, err = run_cli(["check-batch", config, "--num_gpus", "2", "--json"], capsys)
    report = json.loads(out)
    assert report["consistent"] is False and len(report["findings"]) == 1
    assert "12 != micro * grad_accum * dp = 2 * 2 * 2 = 8" in report["findings"][0]
    assert report["fix"]["gradient_accumulation_steps"] == 3
    assert_one_line_error(code, err, "gradient_accumulation_steps 2 -> 3", "train_batch_size stays 12")


def test_yaml_files_merge_with_dash_and_underscore_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several NeoX files are merged; train-batch-size and train_batch_size are the same key."""
    hostfile = write(tmp_path / "hostfile", HOSTFILES["2x4"])
    a = write(tmp_path / "a.yml", '{"pipe-parallel-size": 2, "model-parallel-size": 2,}\n')
    b = write(
        tmp_path / "b.yml",
        f"train-batch-size: 16\ntrain_micro_batch_size_per_gpu: 4\n"
        f"gradient_accumulation_steps: 2\nhostfile: {hostfile}\n",
    )
    config = read_config([a, b])
    assert (config.pipe_parallel_size, config.model_parallel_size, config.train_batch_size) == (2, 2, 16)
    code, out, err = run_cli(["check-batch", a, b], capsys)
    assert code == 0, err
    assert "dp = world / (pp * mp) = 8 / (2 * 2) = 2" in out


BAD_INPUT = [
    (
        "string-train_batch_size-yaml",
        "neox.yml",
        'train_batch_size: "16"\n',
        [],
        ['"train_batch_size"', 'the string "16"', "without quotes"],
    ),
    (
        "string-micro-json",
        "ds.json",
        '{"train_batch_size": 16, "train_micro_batch_size_per_gpu": "2"}',
        [],
        ['"train_micro_batch_size_per_gpu"', 'the string "2"'],
    ),
    (
        "float-gas",
        "ds.json",
        '{"train_batch_size": 16, "gradient_accumulation_steps": 2.0}',
        [],
        ['"gradient_accumulation_steps"', "expected an integer"],
    ),
    ("bool-tbs", "neox.yml", "train_batch_size: true\n", [], ['"train_batch_size"', "boolean"]),
    (
        "zero-micro",
        "ds.json",
        '{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 0}',
        [],
        ["expected an integer >= 1"],
    ),
    (
        "dp-not-whole",
        "ds.json",
        '{"train_batch_size": 16, "pipe_parallel_size": 3}',
        ["--num_gpus", "8"],
        ["dp = world / (pp * mp) = 8 / (3 * 1) = 2.67 is not a whole number"],
    ),
    (
        "dp-not-whole-neox",
        "neox.yml",
        "train_batch_size: 16\nmodel_parallel_size: 3\nglobal_num_gpus: 4\n",
        ["--num_gpus", "4"],
        ["is not a whole number"],
    ),
    (
        "gas-rounds-to-0",
        "ds.json",
        '{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2}',
        ["--num_gpus", "4"],
        ["gradient_accumulation_steps rounds to 0", "4 // 2 // 4 = 0", "train_micro_batch_size_per_gpu 2 -> 1"],
    ),
    (
        "removed-amp",
        "ds.json",
        '{"train_batch_size": 16, "amp": {"enabled": false}}',
        [],
        ['"amp"', "rejected by DeepSpeed", "remove it"],
    ),
    (
        "removed-sparse_gradients-false",
        "ds.json",
        '{"train_batch_size": 16, "sparse_gradients": false}',
        [],
        ['"sparse_gradients"'],
    ),
    (
        "removed-curriculum-neox",
        "neox.yml",
        "train_batch_size: 16\ncurriculum_learning: {enabled: false}\n",
        [],
        ['"curriculum_learning"'],
    ),
    (
        "removed-zero-subkey",
        "ds.json",
        '{"train_batch_size": 16, "zero_optimization": {"mics_shard_size": 2}}',
        [],
        ['"zero_optimization.mics_shard_size"'],
    ),
    (
        "neither-batch-key",
        "ds.json",
        '{"gradient_accumulation_steps": 2}',
        [],
        ["neither train_batch_size nor train_micro_batch_size_per_gpu"],
    ),
    ("invalid-yaml", "neox.yml", "train_batch_size: [16\n", [], ["is not valid YAML"]),
    ("invalid-json", "ds.json", '{"train_batch_size": 16,,}', [], ["is not valid JSON"]),
    ("duplicate-json-key", "ds.json", '{"train_batch_size": 16, "train_batch_size": 8}', [], ["twice"]),
    ("not-a-mapping", "neox.yml", "- 16\n", [], ["not a mapping"]),
    ("wrong-extension", "config.txt", "train_batch_size: 16\n", [], ['extension ".txt"']),
]


@pytest.mark.parametrize(
    ("name", "text", "flags", "needles"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_bad_input_exits_2_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    text: str,
    flags: list[str],
    needles: list[str],
) -> None:
    monkeypatch.setenv("LOCAL_SIZE", "1")
    path = write(tmp_path / name, text)
    code, _, err = run_cli(["check-batch", path, *flags], capsys)
    assert_one_line_error(code, err, *needles)


def test_unknown_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["check-batch", str(tmp_path / "missing.yml")], capsys)
    assert_one_line_error(code, err, "missing.yml", "not found")


def test_key_in_two_neox_files_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NeoX's from_ymls stops when the later file writes an already loaded key as NeoX stores it (with '_')."""
    a = write(tmp_path / "a.yml", "train-batch-size: 16\n")
    b = write(tmp_path / "b.yml", "train_batch_size: 32\n")
    code, _, err = run_cli(["check-batch", a, b], capsys)
    assert_one_line_error(code, err, "train_batch_size: already set in", "a.yml (as train-batch-size)")


def test_neox_default_valued_removed_key_is_not_sent(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NeoX drops DeepSpeed fields at NeoX's default: sparse_gradients: false never reaches DeepSpeed."""
    monkeypatch.setenv("LOCAL_SIZE", "2")
    config = neox_yml(
        tmp_path,
        train_batch_size=4,
        train_micro_batch_size_per_gpu=2,
        sparse_gradients=False,
        amp=None,
        global_num_gpus=2,
    )
    code, _, err = run_cli(["check-batch", config], capsys)
    assert code == 0, err


# ---------------------------------------------------------------------------------------------------------
# --fix


@pytest.mark.parametrize(
    ("keys", "flags", "expected"),
    [
        # gas adjusted, micro kept
        (
            {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1},
            ["--num_gpus", "2"],
            (64, 4, 8),
        ),
        # per-rank batch 6 is not a multiple of micro 4: micro becomes 3 (largest divisor <= 4), gas 2
        (
            {"train_batch_size": 12, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1},
            ["--num_gpus", "2"],
            (12, 3, 2),
        ),
        # gas rounding to 0 -> micro 1, gas 1
        ({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2}, ["--num_gpus", "4"], (4, 1, 1)),
        # tbs + gas whose derived micro floors
        ({"train_batch_size": 32, "gradient_accumulation_steps": 3}, ["--num_gpus", "2"], (32, 4, 4)),
    ],
)
def test_fix_keeps_train_batch_size_and_rechecks(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    keys: dict[str, Any],
    flags: list[str],
    expected: tuple[int, int, int],
) -> None:
    """--fix writes a consistent config (exit 1: the input was not), the input is untouched, and the
    written file checks consistent (exit 0) with train_batch_size unchanged."""
    config = ds_json(tmp_path, **keys)
    before = open(config, encoding="utf-8").read()
    out_path = str(tmp_path / "fixed.json")
    code, out, err = run_cli(["check-batch", config, *flags, "--fix", out_path], capsys)
    assert code == 1, err
    assert f"wrote {out_path}" in out and "re-checked: consistent" in out
    assert open(config, encoding="utf-8").read() == before
    fixed = json.load(open(out_path, encoding="utf-8"))
    assert (
        fixed["train_batch_size"],
        fixed["train_micro_batch_size_per_gpu"],
        fixed["gradient_accumulation_steps"],
    ) == expected
    code, out, err = run_cli(["check-batch", out_path, *flags, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["consistent"] is True


def test_fix_neox_sets_global_num_gpus_and_rechecks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = write(tmp_path / "hostfile", HOSTFILES["2x8"])
    config = neox_yml(
        tmp_path,
        train_batch_size=32,
        train_micro_batch_size_per_gpu=4,
        gradient_accumulation_steps=2,
        hostfile=hostfile,
        include="node1:0,1",
        num_gpus=4,
    )
    out_path = str(tmp_path / "fixed.yml")
    code, _, err = run_cli(["check-batch", config, "--fix", out_path], capsys)
    assert code == 1, err
    import yaml

    fixed = yaml.safe_load(open(out_path, encoding="utf-8"))
    assert fixed["global_num_gpus"] == 2 and fixed["gradient_accumulation_steps"] == 4
    assert fixed["train_batch_size"] == 32
    code, out, err = run_cli(["check-batch", out_path], capsys)
    assert code == 0, err


def test_fix_of_a_consistent_config_exits_0(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCAL_SIZE", "2")
    config = ds_json(tmp_path, train_batch_size=8, train_micro_batch_size_per_gpu=2)
    code, _, err = run_cli(["check-batch", config, "--fix", str(tmp_path / "same.json")], capsys)
    assert code == 0, err
    assert json.load(open(tmp_path / "same.json"))["gradient_accumulation_steps"] == 2


def test_fix_impossible_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = ds_json(tmp_path, train_batch_size=64, train_micro_batch_size_per_gpu=2)
    code, _, err = run_cli(["check-batch", config, "--num_gpus", "3", "--fix", str(tmp_path / "f.json")], capsys)
    assert_one_line_error(code, err, "train_batch_size 64 cannot be kept on dp 3", "63 or 66")
    assert not (tmp_path / "f.json").exists()


def test_fix_never_overwrites_the_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = ds_json(tmp_path, train_batch_size=12, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=2)
    before = open(config, encoding="utf-8").read()
    code, _, err = run_cli(["check-batch", config, "--num_gpus", "2", "--fix", config], capsys)
    assert_one_line_error(code, err, "is the input config")
    assert open(config, encoding="utf-8").read() == before


def test_consistent_micro_and_accumulation_rules() -> None:
    assert consistent_micro_and_accumulation(64, 4, 2) == (4, 8)
    assert consistent_micro_and_accumulation(12, 4, 2) == (3, 2)
    assert consistent_micro_and_accumulation(7, 4, 7) == (1, 1)
    with pytest.raises(BatchError, match="not a multiple of dp"):
        consistent_micro_and_accumulation(10, 1, 4)


# ---------------------------------------------------------------------------------------------------------
# worker-side guard


def test_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert check_world(8) == 8
    assert check_world(8, expected_dp=4) == 8
    with pytest.raises(BatchError, match="WORLD_SIZE is 8 .* assumed a world of 4"):
        check_world(4)
    with pytest.raises(BatchError, match=r"dp = 8 / 2 = 4, but the plan assumed dp 8"):
        check_world(16, expected_dp=8)
    with pytest.raises(ConfigError, match="not a multiple of expected_dp"):
        check_world(8, expected_dp=3)
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(ConfigError, match="WORLD_SIZE is not set"):
        check_world(8)


def test_package_import_is_torch_free() -> None:
    code = (
        "import sys, neox_epoch.batch, neox_epoch.batch.cli, neox_epoch.batch.check, neox_epoch.batch.fix, "
        "neox_epoch.batch.world, neox_epoch.batch.preflight, neox_epoch.cli; "
        "neox_epoch.cli.build_parser(['check-batch']); "
        "print(sorted(m for m in ('torch', 'deepspeed') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------------------------------------------
# real launches on CPU


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def deepspeed_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "deepspeed.launcher.runner"]


def launch(
    flags: Sequence[str], probe_args: Sequence[str], out_dir: Any, env: dict[str, str]
) -> tuple[int, list[dict[str, Any]]]:
    """Run ``deepspeed <flags> tests/helpers/ds_rank_probe.py`` on CPU; return its exit code and the per-rank
    records."""
    os.makedirs(out_dir, exist_ok=True)
    full_env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    full_env.update(env)
    full_env["DS_ACCELERATOR"] = "cpu"
    full_env["PYTHONPATH"] = os.pathsep.join([ROOT, full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [*deepspeed_command(), "--master_port", str(free_port()), *flags, PROBE, "--out", str(out_dir), *probe_args]
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    records = [
        json.load(open(os.path.join(out_dir, f), encoding="utf-8"))
        for f in sorted(os.listdir(out_dir))
        if f.endswith(".json")
    ]
    return proc.returncode, records


LAUNCHES = [
    # (id, hostfile, flags check-batch sees, extra launcher-only flags, env)
    ("num_gpus-2", None, ["--num_gpus", "2"], [], {}),
    (
        "hostfile-localhost-3-exclude-1",
        "local3",
        ["--exclude", "localhost:1"],
        ["--no_ssh_check", "--master_addr", "127.0.0.1"],
        {},
    ),
    ("local_size-3-no-flags", None, [], [], {"LOCAL_SIZE": "3"}),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("hostfile", "flags", "launcher_only", "env"), [c[1:] for c in LAUNCHES], ids=[c[0] for c in LAUNCHES]
)
def test_real_launch_starts_the_predicted_world(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    hostfile: str | None,
    flags: list[str],
    launcher_only: list[str],
    env: dict[str, str],
) -> None:
    """deepspeed really starts as many ranks as check-batch predicts, with WORLD_SIZE = that number, on the
    predicted slots; the guard passes for the predicted world (and, in one case, fails for another)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = _materialize(tmp_path, hostfile, flags)
    config = ds_json(tmp_path, train_micro_batch_size_per_gpu=1)
    code, out, err = run_cli(["check-batch", config, *argv, "--json"], capsys)
    assert code == 0, err
    predicted = json.loads(out)
    world = predicted["world_size"]
    ((host, slots),) = predicted["hosts"].items()
    rc, records = launch([*argv, *launcher_only], ["--expected_world", str(world)], tmp_path / "ranks", env)
    assert rc == 0
    assert len(records) == world
    assert sorted(int(r["RANK"]) for r in records) == list(range(world))
    assert {r["WORLD_SIZE"] for r in records} == {str(world)}
    assert {r["guard"] for r in records} == {"ok"}
    assert {r["CUDA_VISIBLE_DEVICES"] for r in records} == {",".join(map(str, slots))}
    assert sorted(r["local_rank_arg"] for r in records) == list(range(world))
    if not flags:  # once: the guard stops every rank of a world the plan did not assume
        rc, records = launch([*argv, *launcher_only], ["--expected_world", str(world + 1)], tmp_path / "wrong", env)
        assert len(records) == world
        assert all(f"WORLD_SIZE is {world}" in r["guard"] for r in records)


@pytest.mark.slow
def test_mismatch_exits_2_with_fix_and_the_fixed_config_launches(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's verification: check-batch catches the mismatch (exit 2, fix in the message) in seconds;
    DeepSpeed finds the same one only inside deepspeed.initialize; the --fix output initializes."""
    config = ds_json(tmp_path, train_batch_size=12, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=2)
    flags = ["--num_gpus", "2"]
    started = time.time()
    code, _, err = run_cli(["check-batch", config, *flags], capsys)
    assert_one_line_error(
        code, err, "12 != micro * grad_accum * dp = 2 * 2 * 2 = 8", "gradient_accumulation_steps 2 -> 3"
    )
    assert time.time() - started < 30
    rc, records = launch(flags, ["--ds_config", config], tmp_path / "bad", {})
    assert rc != 0 and len(records) == 2
    assert all(
        "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 12 != 2 * 2 * 2"
        in r["initialize"]
        for r in records
    )
    fixed = str(tmp_path / "fixed.json")
    code, _, err = run_cli(["check-batch", config, *flags, "--fix", fixed], capsys)
    assert code == 1, err
    rc, records = launch(flags, ["--ds_config", fixed], tmp_path / "good", {})
    assert rc == 0 and [r["initialize"] for r in records] == ["ok", "ok"]
