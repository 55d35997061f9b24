"""ModelOpt-only flags (``add_modelopt_args`` of Megatron-LM's megatron/post_training/arguments.py, which
pretrain_gpt.py adds to parse_args when nvidia-modelopt is installed: ``--enable-gpt-oss``, the
``--export-kd-*`` distillation flags ...) are known flags that do not change the data."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re

import frameworks
import pytest

from neox_epoch.formats.megatron_args import parse_megatron_argv
from neox_epoch.formats.megatron_flags import modelopt_specs
from neox_epoch.util.helptext import option_names

FLAGS = (
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --lr 1e-4 --seq-length 128 --micro-batch-size 2 "
    "--global-batch-size 256 --data-path data/web --split 98,1,1 --eval-interval 10 --train-iters 100"
).split()
MODELOPT = [
    "--enable-gpt-oss",
    "--export-kd-teacher-load",
    "teacher/ckpt",
    "--export-kd-cfg",
    "kd.yaml",
    "--export-kd-teacher-model-config",
    "teacher.yaml",
    "--export-force-local-attention",
]


def _trees() -> dict[str, str]:
    """Megatron-LM version of each option table -> the Megatron-LM tree it was read from."""
    return {"0.16.1": frameworks.megatron_lm_dir(), "0.19.2": frameworks.megatron_lm_019_dir()}


def _real_modelopt_options(tree: str) -> set[str]:
    """The option strings the tree's own add_modelopt_args registers (run on a bare parser: it is plain argparse)."""
    spec = importlib.util.spec_from_file_location(
        "_real_modelopt", os.path.join(tree, "megatron", "post_training", "arguments.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parser = argparse.ArgumentParser(add_help=False)
    module.add_modelopt_args(parser)
    return set(option_names(parser))  # from its --help: argparse's list of actions is private


@pytest.mark.parametrize("version", ["0.16.1", "0.19.2"])
def test_modelopt_table_is_the_trees_add_modelopt_args(version: str) -> None:
    tree = _trees()[version]
    real = _real_modelopt_options(tree)
    assert set(modelopt_specs(version)) == real
    assert {"--enable-gpt-oss", "--export-kd-teacher-load", "--export-kd-cfg"} <= real
    assert len(real) == {"0.16.1": 18, "0.19.2": 21}[version]


@pytest.mark.parametrize("version", ["0.16.1", "0.19.2"])
def test_modelopt_flags_do_not_change_the_data(version: str) -> None:
    """The dests of the ModelOpt flags appear nowhere in the code that builds or draws pretrain_gpt.py's data
    (pretrain_gpt.py, megatron/training, megatron/core/datasets of the tree), and a command line with them plans
    exactly as without them, listing them as not affecting the plan."""
    tree = _trees()[version]
    # modelopt_enabled: training.py sets it (args.modelopt_enabled = True) when it loads a ModelOpt checkpoint;
    # it chooses the loss function, not the data; the pattern below would match that assignment
    dests = {spec["dest"] for spec in modelopt_specs(version).values()} - {"modelopt_enabled"}
    used = []
    for root in ("pretrain_gpt.py", "megatron/training", "megatron/core/datasets"):
        path = os.path.join(tree, root)
        files = (
            [path]
            if path.endswith(".py")
            else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".py")]
        )
        for file in files:
            text = open(file, encoding="utf-8").read()
            used += [(file, d) for d in dests if re.search(rf"\bargs\.{d}\b", text)]
    assert used == []
    base = parse_megatron_argv(["pretrain_gpt.py", *FLAGS], version=version)
    with_modelopt = parse_megatron_argv(["torchrun", "pretrain_gpt.py", *FLAGS, *MODELOPT], version=version)
    assert with_modelopt.train_iters == base.train_iters == 100
    assert with_modelopt.global_batch_size == base.global_batch_size == 256
    assert with_modelopt.blend == base.blend and with_modelopt.split == base.split
    assert [f for f in with_modelopt.not_affecting_plan if f not in base.not_affecting_plan] == [
        "--enable-gpt-oss",
        "--export-kd-teacher-load",
        "--export-kd-cfg",
        "--export-kd-teacher-model-config",
        "--export-force-local-attention",
    ]
