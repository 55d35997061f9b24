"""Fault suite, damaged checkpoints: ``resume-check`` on a checkpoint whose small files are cut off, not UTF-8,
hold garbage, a pickle announcing 2^62 bytes, a directory where a file belongs, or a negative iteration is exit 2
with one line naming the file, what was found, what was expected and the fix; never exit 3, never a number
computed from it (a negative iteration gave consumed = -80). The checkpoints are written in the layouts DeepSpeed
(GPT-NeoX) and Megatron-LM write (tests/formats/test_checkpoint.py reads a real DeepSpeed one); each case asserts that
no
file of the checkpoint or the config changed (hash and mode).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import shutil
import zipfile
from collections.abc import Callable

import pytest
from faults_util import cli, corpus, plan_config, refused, tree


def _pt(obj_bytes: bytes) -> bytes:
    """A zip-format torch.save file holding the pickle ``obj_bytes`` as its data.pkl (stored, as torch writes)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", obj_bytes)
    return buf.getvalue()


def _neox_states(iteration: object) -> bytes:
    saved = {
        "iteration": iteration,
        "dp_world_size": 1,
        "mp_world_size": 1,
        "ds_config": {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1},
    }
    return _pt(pickle.dumps(saved, protocol=2))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A stock NeoX checkpoint (save/latest, save/global_step20/ with its model states and configs/run.yml) and
    the config of the resumed run."""
    d = str(tmp_path_factory.mktemp("damaged_ckpt"))
    config = plan_config(d, corpus(os.path.join(d, "data")))
    save = os.path.join(d, "save")
    tag = os.path.join(save, "global_step20")
    os.makedirs(os.path.join(tag, "configs"))
    with open(os.path.join(save, "latest"), "w") as f:
        f.write("global_step20")
    with open(os.path.join(tag, "mp_rank_00_model_states.pt"), "wb") as f:
        f.write(_neox_states(20))
    with open(config) as f, open(os.path.join(tag, "configs", "run.yml"), "w") as g:
        g.write(f.read())
    return {"dir": d, "save": save, "config": config}


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _megatron(save: str, tracker: bytes) -> None:
    shutil.rmtree(save)
    _write(os.path.join(save, "latest_checkpointed_iteration.txt"), tracker)
    common = {"iteration": 10, "args": argparse.Namespace(global_batch_size=8, seq_length=32)}
    _write(os.path.join(save, "iter_0000010", "common.pt"), _pt(pickle.dumps(common, protocol=2)))


TAG = "global_step20"
#: case -> (damage(save directory), the file the message names (relative to save), needles)
CASES: dict[str, tuple[Callable[[str], None], str, tuple[str, ...]]] = {
    "state truncated": (
        lambda s: _write(os.path.join(s, TAG, "neox_epoch_state.json"), b'{"version": 1, "consu'),
        os.path.join(TAG, "neox_epoch_state.json"),
        ("not a neox-epoch state (not JSON", "delete it to resume"),
    ),
    "state not UTF-8": (
        lambda s: _write(os.path.join(s, TAG, "neox_epoch_state.json"), b'{"version": \xff}'),
        os.path.join(TAG, "neox_epoch_state.json"),
        ("is not UTF-8 text: byte b'\\xff' at offset 12", "restore it from the checkpoint's copy"),
    ),
    "latest not UTF-8": (
        lambda s: _write(os.path.join(s, "latest"), b"global_step\xe920"),
        "latest",
        ("DeepSpeed's 'latest' file is not UTF-8 text", "write the tag of the last complete save"),
    ),
    "latest cut off": (
        lambda s: _write(os.path.join(s, "latest"), b"global_st"),
        "latest",
        ("names checkpoint global_st, which is missing",),
    ),
    "tracker abc": (
        lambda s: _megatron(s, b"abc\n"),
        "latest_checkpointed_iteration.txt",
        (
            "holds 'abc', expected an iteration (a whole number >= 0) or 'release'",
            "Invalid metadata file",
            "write the iteration of the last complete save",
        ),
    ),
    "tracker negative": (
        lambda s: _megatron(s, b"-80"),
        "latest_checkpointed_iteration.txt",
        ("iteration is -80, expected a whole number >= 0", "Megatron-LM refuses a negative one"),
    ),
    "tracker not UTF-8": (
        lambda s: _megatron(s, b"\xff10"),
        "latest_checkpointed_iteration.txt",
        ("is not UTF-8 text", "or 'release' into it"),
    ),
    "iteration None": (
        lambda s: _write(os.path.join(s, TAG, "mp_rank_00_model_states.pt"), _neox_states(None)),
        os.path.join(TAG, "mp_rank_00_model_states.pt"),
        ("iteration is None, expected a whole number >= 0", "use another save"),
    ),
    "iteration forty": (
        lambda s: _write(os.path.join(s, TAG, "mp_rank_00_model_states.pt"), _neox_states("forty")),
        os.path.join(TAG, "mp_rank_00_model_states.pt"),
        ("iteration is 'forty', expected a whole number >= 0",),
    ),
    "iteration negative": (
        lambda s: _write(os.path.join(s, TAG, "mp_rank_00_model_states.pt"), _neox_states(-80)),
        os.path.join(TAG, "mp_rank_00_model_states.pt"),
        ("iteration is -80, expected a whole number >= 0",),
    ),
    "pickle announcing 2^62 bytes": (
        lambda s: _write(
            os.path.join(s, TAG, "mp_rank_00_model_states.pt"),
            _pt(b"\x80\x04\x8e" + (1 << 62).to_bytes(8, "little") + b"abc."),
        ),
        os.path.join(TAG, "mp_rank_00_model_states.pt"),
        ("announces an object larger than the file", "copy it again from the save"),
    ),
    "pickle cut off": (
        lambda s: _write(
            os.path.join(s, TAG, "mp_rank_00_model_states.pt"),
            _pt(pickle.dumps({"iteration": 20, "args": {"x": 1}}, protocol=2)[:-9]),
        ),
        os.path.join(TAG, "mp_rank_00_model_states.pt"),
        ("its data.pkl cannot be read", "truncated or not a checkpoint"),
    ),
    "configs holds a directory": (
        lambda s: os.makedirs(os.path.join(s, TAG, "configs", "extra.yml")),
        os.path.join(TAG, "configs", "extra.yml"),
        ("a directory where a config file NeoX copied belongs", "delete configs/ to compare without them"),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_damaged_checkpoint_is_exit_2(base: dict[str, str], case: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    damage, named, needles = CASES[case]
    save = str(tmp_path / "save")
    shutil.copytree(base["save"], save)
    damage(save)
    before, config_before = tree(save), tree(os.path.dirname(base["config"]))
    line = refused(cli(["resume-check", save, base["config"]]), "resume-check", *needles)
    assert os.path.join(save, named) in line or (case == "latest cut off" and save in line), line
    assert tree(save) == before and tree(os.path.dirname(base["config"])) == config_before


def test_the_undamaged_checkpoint_resumes(base: dict[str, str]) -> None:
    """The same checkpoint undamaged: resume-check reads it (iteration 20 x train_batch_size 4 = 80 consumed)."""
    code, out, err = cli(["resume-check", base["save"], base["config"], "--json"])
    assert code in (0, 1), err
    plan = json.loads(out)
    assert (plan["iteration"], plan["consumed_samples"], plan["start_sample"]) == (20, 80, 80)
