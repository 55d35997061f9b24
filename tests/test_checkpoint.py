"""Reading what a checkpoint says about its run, without torch and without its weights (neox_epoch.checkpoint).

A real DeepSpeed 0.19.8 checkpoint saved on CPU the way GPT-NeoX saves one (tests/ds_save_probe.py) is read
back: NeoX's client state and DeepSpeed's own keys come back exactly, the weights stay unread; a pickle that
names a dangerous global is read without running it; bad paths and files are one-line errors.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import zipfile

import optional
import pytest

from neox_epoch.checkpoint import NotRead, read_checkpoint, read_pt
from neox_epoch.errors import ConfigError

HERE = os.path.dirname(os.path.abspath(__file__))


@optional.needs("deepspeed")
def test_real_deepspeed_checkpoint_reads_without_torch(tmp_path):  # type: ignore[no-untyped-def]
    """iteration 7 and NeoX's args from the client state; DeepSpeed's dp_world_size 1 and its ds_config
    (train_batch_size 8 = micro 2 x grad-accum 4 x dp 1) as saved; the model's weights are not read; the
    reader itself imports no torch (checked in a fresh interpreter)."""
    save = tmp_path / "save"
    r = subprocess.run([sys.executable, os.path.join(HERE, "ds_save_probe.py"), str(save)], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, DS_ACCELERATOR="cpu"))
    assert r.returncode == 0, r.stderr[-3000:]
    code = ("import sys, json; from neox_epoch.checkpoint import read_checkpoint; c = read_checkpoint(sys.argv[1]); "
            "print(json.dumps([c.framework, os.path.basename(c.directory), c.iteration, c.values['args'], "
            "c.values['dp_world_size'], c.values['ds_config']['train_batch_size'], "
            "c.values['ds_config']['gradient_accumulation_steps'], c.values['ds_version'], "
            "'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", "import os; " + code, str(save)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == '["neox", "global_step7", 7, {"num_layers": 2}, 1, 8, 4, "0.19.8", false]'
    saved = read_pt(str(save / "global_step7" / "mp_rank_00_model_states.pt"))
    weights = saved["module"]
    assert list(weights) == ["weight", "bias"] and all(isinstance(v, NotRead) for v in weights.values())
    assert read_checkpoint(str(save / "global_step7")).iteration == 7  # a tag directory works too


def _zip_pickle(obj_bytes: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", obj_bytes)
    return buf.getvalue()


def test_a_global_outside_the_allowlist_is_never_called(tmp_path):  # type: ignore[no-untyped-def]
    """A checkpoint whose pickle calls os.system comes back as NotRead, and the command never ran."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pt"
    path.write_bytes(_zip_pickle(pickle.dumps({"iteration": 3, "x": Evil()}, protocol=2)))
    got = read_pt(str(path))
    assert got["iteration"] == 3 and isinstance(got["x"], NotRead) and not marker.exists()


@pytest.mark.parametrize("make,message", [
    (lambda p: None, "not a directory"),
    (lambda p: p.mkdir(), "not a checkpoint directory: expected DeepSpeed's 'latest' file"),
    (lambda p: (p.mkdir(), (p / "latest").write_text("global_step5")), "names checkpoint global_step5, which is missing"),
])
def test_bad_checkpoint_directories(tmp_path, make, message):  # type: ignore[no-untyped-def]
    path = tmp_path / "ckpt"
    make(path)
    with pytest.raises(ConfigError, match=message):
        read_checkpoint(str(path))


def test_a_file_that_is_not_a_zip_says_what_to_do(tmp_path):  # type: ignore[no-untyped-def]
    path = tmp_path / "old.pt"
    path.write_bytes(pickle.dumps({"iteration": 1}))
    with pytest.raises(ConfigError, match="not a zip-format torch.save file"):
        read_pt(str(path))


# ---------------------------------------------------------------------------------------------------------
# neox-epoch resume-check: bad input is one line, exit 2


def _cli(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "neox_epoch.cli", *argv], capture_output=True, text=True, timeout=120)


def test_resume_check_refuses_a_missing_checkpoint_and_config(tmp_path):  # type: ignore[no-untyped-def]
    (tmp_path / "new.yml").write_text("train_micro_batch_size_per_gpu: 2\n")
    r = _cli(["resume-check", str(tmp_path / "nowhere"), str(tmp_path / "new.yml")])
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a directory" in r.stderr
    (tmp_path / "ckpt").mkdir()
    r = _cli(["resume-check", str(tmp_path / "ckpt"), str(tmp_path / "absent.yml")])
    assert r.returncode == 2 and "absent.yml: config file not found" in r.stderr


def test_resume_check_refuses_a_megatron_lm_checkpoint_for_now(tmp_path):  # type: ignore[no-untyped-def]
    """A Megatron-LM layout (latest_checkpointed_iteration.txt, iter_0000010/common.pt holding its args) is read,
    then refused in one line: only NeoX resumes are checked so far."""
    import argparse

    tag = tmp_path / "iter_0000010"
    tag.mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("common/data.pkl", pickle.dumps({"iteration": 10, "args": argparse.Namespace(global_batch_size=8)},
                                                    protocol=2))
    (tag / "common.pt").write_bytes(buf.getvalue())
    ckpt = read_checkpoint(str(tmp_path))
    assert (ckpt.framework, ckpt.iteration, ckpt.values["global_batch_size"]) == ("megatron", 10, 8)
    (tmp_path / "new.yml").write_text("train_micro_batch_size_per_gpu: 2\n")
    r = _cli(["resume-check", str(tmp_path), str(tmp_path / "new.yml")])
    assert r.returncode == 2 and "resume-check reads GPT-NeoX (DeepSpeed) checkpoints only for now" in r.stderr


def test_resume_check_finds_a_changed_sequence_length(tmp_path):  # type: ignore[no-untyped-def]
    """A checkpoint whose hooks state says seq_length 128, resumed with 256 and the same batch: the documents are
    cut into other samples, a finding (exit 1) that names both lengths. The checkpoint file is written in the
    layout DeepSpeed writes (test_real_deepspeed_checkpoint_reads_without_torch reads a real one), with the keys
    resume-check reads; the data is a real tiny corpus."""
    import yaml

    from neox_epoch.corpus import write_random_corpus
    from neox_epoch.neox.resume_state import ResumeState, TrainBuild, write_state

    tag = tmp_path / "ckpt" / "global_step10"
    tag.mkdir(parents=True)
    (tmp_path / "ckpt" / "latest").write_text("global_step10")
    saved = {"iteration": 10, "dp_world_size": 1, "ds_config": {"train_batch_size": 4,
                                                                 "train_micro_batch_size_per_gpu": 4,
                                                                 "gradient_accumulation_steps": 1}}
    (tag / "mp_rank_00_model_states.pt").write_bytes(_zip_pickle(pickle.dumps(saved, protocol=2)))
    write_state(str(tag), ResumeState(iteration=10, consumed_samples=40, train_batch_size=4, loader_batch=4,
                                      samples_total=80, train_iters=20, builds={"train": TrainBuild(80, 1, 90)},
                                      seq_length=128))
    prefix = str(tmp_path / "web")
    write_random_corpus(prefix, 1, 300, 20, 200)
    new = tmp_path / "new.yml"
    new.write_text(yaml.safe_dump({"data_path": prefix, "split": "100,0,0", "seq_length": 256, "train_iters": 20,
                                   "train_micro_batch_size_per_gpu": 4, "global_num_gpus": 1}))
    r = _cli(["resume-check", str(tmp_path / "ckpt"), str(new), "--json"])
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["start_sample"] == 40 and out["skipped"] is None  # same batch: NeoX starts where it stopped
    assert [f.split(":")[0] for f in out["findings"]] == ["seq-length-changed"]
    assert "seq_length 128 -> 256" in out["findings"][0]
