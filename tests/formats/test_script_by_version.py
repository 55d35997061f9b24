"""``split_launcher`` / the foreign-framework check decide which ``*.py`` token is the script by the option table
of the Megatron-LM version the plan finally mirrors: a ``.py`` value of a flag only 0.19.2 has is that flag's
value when 0.19.2 is planned (it used to be read with 0.16.1's table before the version was known)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from neox_epoch.cli import main
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.megatron_launcher import split_launcher
from neox_epoch.semantics import megatron_lm as megatron_lm_sem

FLAGS = (
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --lr 1e-4 --seq-length 128 --micro-batch-size 2 "
    "--global-batch-size 8 --split 98,1,1 --eval-interval 10 --train-iters 20"
).split()


def test_split_launcher_reads_the_planned_versions_table() -> None:
    line = ["--chat-template", "deepy.py", "torchrun", "--nproc_per_node", "2", "pretrain_gpt.py", "--seed", "3"]
    with megatron_lm_sem.using(megatron_lm_sem.rules_for("0.19.2")):
        assert split_launcher(line) == (
            ["torchrun", "--nproc_per_node", "2"],
            ["--chat-template", "deepy.py", "--seed", "3"],
        )
    with megatron_lm_sem.using(
        megatron_lm_sem.rules_for("0.16.1")
    ):  # --chat-template is not a 0.16.1 flag: deepy.py is the script
        assert split_launcher(line) == (
            [],
            ["--chat-template", "torchrun", "--nproc_per_node", "2", "pretrain_gpt.py", "--seed", "3"],
        )


@pytest.mark.parametrize("version", ["0.19.2", "0.16.1"])
def test_plan_with_a_py_value_of_a_0_19_flag(tmp_path: Any, capsys: pytest.CaptureFixture[str], version: str) -> None:
    write_random_corpus(str(tmp_path / "web"), 5, 300, 1, 200)
    os.chdir(tmp_path)
    code = main(
        ["plan", "--framework-version", version, "--data-path", "web", *FLAGS, "--chat-template", "deepy.py", "--json"]
    )
    out, err = capsys.readouterr()
    if version == "0.19.2":
        assert code == 0, err
        plan = json.loads(out)
        assert plan["train_iters"] == 20
        assert "--chat-template" in " ".join(plan["notes"])
    else:
        assert code == 2
        # 0.16.1 has no --chat-template: deepy.py is no flag's value there, so it is the script (NeoX's launcher)
        assert err.startswith("neox-epoch plan: error: this command line looks like a GPT-NeoX launch")
