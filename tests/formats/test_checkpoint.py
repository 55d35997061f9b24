"""Reading what a checkpoint says about its run, without torch and without its weights (neox_epoch.formats.checkpoint).

A real DeepSpeed 0.19.8 checkpoint saved on CPU the way GPT-NeoX saves one (tests/helpers/ds_save_probe.py) is read
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

import frameworks
import optional
import pytest

from neox_epoch.errors import ConfigError
from neox_epoch.formats.checkpoint import NotRead, read_checkpoint, read_pt

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/


@optional.needs("deepspeed")
def test_real_deepspeed_checkpoint_reads_without_torch(tmp_path):  # type: ignore[no-untyped-def]
    """iteration 7 and NeoX's args from the client state; DeepSpeed's dp_world_size 1 and its ds_config
    (train_batch_size 8 = micro 2 x grad-accum 4 x dp 1) as saved; the model's weights are not read; the
    reader itself imports no torch (checked in a fresh interpreter)."""
    save = tmp_path / "save"
    r = subprocess.run(
        [sys.executable, os.path.join(HERE, "helpers", "ds_save_probe.py"), str(save)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(
            os.environ,
            DS_ACCELERATOR="cpu",
            # the project's own JIT folder: a lock left in the user's folder by
            # a killed build elsewhere would make the probe wait forever
            TORCH_EXTENSIONS_DIR=os.path.join(
                frameworks.CACHE, "torch-extensions", f"probe-py{sys.version_info[0]}{sys.version_info[1]}"
            ),
        ),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    code = (
        "import sys, json; from neox_epoch.formats.checkpoint import read_checkpoint; "
        "c = read_checkpoint(sys.argv[1]); "
        "print(json.dumps([c.framework, os.path.basename(c.directory), c.iteration, c.values['args'], "
        "c.values['dp_world_size'], c.values['ds_config']['train_batch_size'], "
        "c.values['ds_config']['gradient_accumulation_steps'], c.values['ds_version'], "
        "'torch' in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import os; " + code, str(save)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
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


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda p: None, "not a directory"),
        (lambda p: p.mkdir(), "not a checkpoint directory: expected DeepSpeed's 'latest' file"),
        (
            lambda p: (p.mkdir(), (p / "latest").write_text("global_step5")),
            "names checkpoint global_step5, which is missing",
        ),
    ],
)
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


def test_resume_check_wants_a_megatron_command_line_for_a_megatron_checkpoint(tmp_path):  # type: ignore[no-untyped-def]
    """A Megatron-LM layout (latest_checkpointed_iteration.txt, iter_0000010/common.pt holding its args) is read;
    resumed with a NeoX config instead of a Megatron-LM command line, one line says what to give."""
    import argparse

    tag = tmp_path / "iter_0000010"
    tag.mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(
            "common/data.pkl",
            pickle.dumps({"iteration": 10, "args": argparse.Namespace(global_batch_size=8)}, protocol=2),
        )
    (tag / "common.pt").write_bytes(buf.getvalue())
    ckpt = read_checkpoint(str(tmp_path))
    assert (ckpt.framework, ckpt.iteration, ckpt.values["global_batch_size"]) == ("megatron", 10, 8)
    (tmp_path / "new.yml").write_text("train_micro_batch_size_per_gpu: 2\n")
    r = _cli(["resume-check", str(tmp_path), str(tmp_path / "new.yml")])
    assert r.returncode == 2 and "a Megatron-LM checkpoint; give its Megatron-LM command line" in r.stderr


def test_resume_check_finds_a_changed_sequence_length(tmp_path):  # type: ignore[no-untyped-def]
    """A checkpoint whose hooks state says seq_length 128, resumed with 256 and the same batch: the documents are
    cut into other samples, a finding (exit 1) that names both lengths. The checkpoint file is written in the
    layout DeepSpeed writes (test_real_deepspeed_checkpoint_reads_without_torch reads a real one), with the keys
    resume-check reads; the data is a real tiny corpus."""
    import yaml

    from neox_epoch.formats.corpus import write_random_corpus
    from neox_epoch.neox.resume_state import ResumeState, write_state
    from neox_epoch.semantics import TrainBuild

    tag = tmp_path / "ckpt" / "global_step10"
    tag.mkdir(parents=True)
    (tmp_path / "ckpt" / "latest").write_text("global_step10")
    saved = {
        "iteration": 10,
        "dp_world_size": 1,
        "ds_config": {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1},
    }
    (tag / "mp_rank_00_model_states.pt").write_bytes(_zip_pickle(pickle.dumps(saved, protocol=2)))
    write_state(
        str(tag),
        ResumeState(
            iteration=10,
            consumed_samples=40,
            train_batch_size=4,
            loader_batch=4,
            samples_total=80,
            train_iters=20,
            builds={"train": TrainBuild(80, 1, 90)},
            seq_length=128,
        ),
    )
    prefix = str(tmp_path / "web")
    write_random_corpus(prefix, 1, 300, 20, 200)
    new = tmp_path / "new.yml"
    new.write_text(
        yaml.safe_dump(
            {
                "data_path": prefix,
                "split": "100,0,0",
                "seq_length": 256,
                "train_iters": 20,
                "train_micro_batch_size_per_gpu": 4,
                "global_num_gpus": 1,
            }
        )
    )
    r = _cli(["resume-check", str(tmp_path / "ckpt"), str(new), "--json"])
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["start_sample"] == 40 and out["skipped"] is None  # same batch: NeoX starts where it stopped
    assert [f.split(":")[0] for f in out["findings"]] == ["seq-length-changed"]
    assert "seq_length 128 -> 256" in out["findings"][0]
    # the same state as the hooks' checkpoint record in the run's JSONL: the same report without the checkpoint
    state = json.loads((tag / "neox_epoch_state.json").read_text())
    log = tmp_path / "logs"
    log.mkdir()
    records = [
        {"event": "checkpoint", "iteration": it, "tag": f"global_step{it}", "state": {**state, "iteration": it}}
        for it in (5, 10)
    ]
    (log / "neox_epoch.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [{"event": "plan"}, *records]))
    from_log = _cli(["resume-check", str(log), str(new), "--json"])  # the last record: iteration 10
    assert from_log.returncode == 1, from_log.stderr
    got = json.loads(from_log.stdout)
    assert (
        got["checkpoint"].endswith("neox_epoch.jsonl (global_step10)") and "in the run's JSONL" in got["consumed_how"]
    )
    same = ("checkpoint", "consumed_how")
    assert {k: v for k, v in got.items() if k not in same} == {k: v for k, v in out.items() if k not in same}
    earlier = json.loads(
        _cli(["resume-check", str(log / "neox_epoch.jsonl"), str(new), "--iteration", "5", "--json"]).stdout
    )
    assert (earlier["iteration"], earlier["consumed_samples"]) == (5, 40)
    absent = _cli(["resume-check", str(log), str(new), "--iteration", "7"])
    assert absent.returncode == 2 and "no checkpoint record for iteration 7; recorded: [5, 10]" in absent.stderr


def test_resume_check_of_a_megatron_core_run_with_the_counters(tmp_path):  # type: ignore[no-untyped-def]
    """A DeepSpeed checkpoint whose client state holds the live counters' state (as the megatron-core example
    saves it; the real run is tests/mcore/test_mcore_e2e.py): resumed with another DeepSpeed config it continues at the
    consumed samples and ends at 100 + (12160 - 1600) // 28 = 477 with 4 samples undrawn; without --cache there
    are no per-source numbers; a state that is not the counters', or --cache for a NeoX checkpoint, is one line."""
    tag = tmp_path / "ckpt" / "iter_100"
    tag.mkdir(parents=True)
    (tmp_path / "ckpt" / "latest").write_text("iter_100")
    state = {
        "format": 1,
        "iteration": 100,
        "consumed_samples": 1600,
        "samples": {"web": 771, "code": 829},
        "global_batch_size_planned": 16,
        "dataset_size": 12160,
        "global_batch_size": 16,
    }
    saved = {"iteration": 100, "consumed_samples": 1600, "neox_epoch_counters": state}
    (tag / "mp_rank_00_model_states.pt").write_bytes(_zip_pickle(pickle.dumps(saved, protocol=2)))
    ds = tmp_path / "ds_28.json"
    ds.write_text(
        json.dumps({"train_batch_size": 28, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 7})
    )
    r = _cli(["resume-check", str(tmp_path / "ckpt"), str(ds), "--world-size", "2", "--json"])
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert (out["resumed_by"], out["start_sample"], out["new_train_batch_size"], out["sources"]) == (
        "megatron-core",
        1600,
        28,
        [],
    )
    assert out["findings"] == [
        "remainder: the last 4 of the train dataset's 12160 samples are never drawn "
        "((12160 - 1600) % 28); a global batch dividing 10560 draws them all"
    ]
    assert out["notes"][0] == "the run ends at iteration 477 = 100 + (12160 - 1600) // 28"
    three = _cli(["resume-check", str(tmp_path / "ckpt"), str(ds), "--world-size", "3"])
    assert three.returncode == 2 and "DeepSpeed would refuse it" in three.stderr and three.stderr.count("\n") == 1
    saved["neox_epoch_counters"] = {"format": 1}
    (tag / "mp_rank_00_model_states.pt").write_bytes(_zip_pickle(pickle.dumps(saved, protocol=2)))
    bad = _cli(["resume-check", str(tmp_path / "ckpt"), str(ds), "--world-size", "2"])
    assert bad.returncode == 2 and "is not what LiveCounters.state_dict() returns" in bad.stderr
    neox = _stock_checkpoint(tmp_path / "neox", None)
    (tmp_path / "new.yml").write_text("train_micro_batch_size_per_gpu: 2\n")
    r = _cli(["resume-check", str(neox), str(tmp_path / "new.yml"), "--cache", str(tmp_path)])
    assert r.returncode == 2 and "--cache" in r.stderr and "is a GPT-NeoX checkpoint" in r.stderr


def test_resume_check_from_a_log_says_what_is_missing(tmp_path):  # type: ignore[no-untyped-def]
    """A JSONL without the checkpoint record, without the iteration asked, or cut short: one line, exit 2."""
    (tmp_path / "new.yml").write_text("train_micro_batch_size_per_gpu: 2\n")
    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps({"event": "plan"}) + "\n")
    r = _cli(["resume-check", str(log), str(tmp_path / "new.yml")])
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no checkpoint record in it" in r.stderr
    record = {"event": "checkpoint", "iteration": 3, "state": {"version": 1}}
    log.write_text(json.dumps(record) + "\n")
    r = _cli(["resume-check", str(log), str(tmp_path / "new.yml")])
    assert r.returncode == 2 and "run.jsonl:1: not a neox-epoch state (KeyError" in r.stderr
    log.write_text('{"event": "checkpoint", "iter\n')
    r = _cli(["resume-check", str(log), str(tmp_path / "new.yml"), "--iteration", "7"])
    assert r.returncode == 2 and "run.jsonl:1: not JSON" in r.stderr


def _stock_checkpoint(tmp_path, config: dict | None):  # type: ignore[no-untyped-def]
    """A checkpoint of stock NeoX (no neox-epoch state) at iteration 105 of train_batch_size 4, with ``config`` as
    the file NeoX copies into the tag's configs/ (None: no configs/)."""
    import yaml

    tag = tmp_path / "ckpt" / "global_step105"
    tag.mkdir(parents=True)
    (tmp_path / "ckpt" / "latest").write_text("global_step105")
    saved = {
        "iteration": 105,
        "dp_world_size": 1,
        "mp_world_size": 1,
        "ds_config": {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1},
    }
    (tag / "mp_rank_00_model_states.pt").write_bytes(_zip_pickle(pickle.dumps(saved, protocol=2)))
    if config is not None:
        (tag / "configs").mkdir()
        (tag / "configs" / "run.yml").write_text(yaml.safe_dump(config))
    return tmp_path / "ckpt"


def _blend_config(tmp_path, weights: list[float]) -> dict:  # type: ignore[no-untyped-def]
    from neox_epoch.formats.corpus import write_random_corpus

    paths = []
    for seed, name in enumerate("abc", start=1):
        paths.append(str(tmp_path / name))
        if not os.path.exists(paths[-1] + ".idx"):
            write_random_corpus(paths[-1], seed, 200 * seed, 20, 180)
    return {
        "train_data_paths": paths,
        "valid_data_paths": paths[:1],
        "test_data_paths": paths[:1],
        "train_data_weights": weights,
        "seq_length": 128,
        "train_iters": 240,
        "train_micro_batch_size_per_gpu": 4,
        "global_num_gpus": 1,
    }


def test_resume_check_reads_a_stock_neox_run_from_the_configs_it_saved(tmp_path):  # type: ignore[no-untyped-def]
    """Stock NeoX saved no neox-epoch state, but it copied its config files into the checkpoint: resume-check plans
    them as NeoX built them, so a resume with the blend's weights 2:1:1 changed to 1:2:1 is a blend-changed
    finding, and the sources whose train index gets another number of epochs (NeoX asks ceil(960 x w x 1.005)
    samples of each) are orders-change findings; the same weights resume cleanly."""
    import yaml

    from neox_epoch.semantics import neox as neox_sem

    ckpt = _stock_checkpoint(tmp_path, _blend_config(tmp_path, [2.0, 1.0, 1.0]))
    new = tmp_path / "new.yml"
    new.write_text(yaml.safe_dump(_blend_config(tmp_path, [1.0, 2.0, 1.0])))
    r = _cli(["resume-check", str(ckpt), str(new), "--json"])
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["start_sample"] == 420 and out["skipped"] is None and out["repeated"] is None
    kinds = [f.split(":")[0] for f in out["findings"]]
    assert kinds[0] == "blend-changed" and "[0.5, 0.25, 0.25]" in out["findings"][0]
    old_requests = neox_sem.normalized_weights_and_num_samples([2.0, 1.0, 1.0], 960)[1]
    new_requests = neox_sem.normalized_weights_and_num_samples([1.0, 2.0, 1.0], 960)[1]
    assert (old_requests, new_requests) == ([483, 242, 242], [242, 483, 242])
    changed = [f.split(":")[1].strip() for f in out["findings"] if f.startswith("orders-change")]
    assert changed and set(changed) <= {"train_0", "train_1"}  # c is asked the same 242 samples
    assert "the saved run's build from the config files in the checkpoint" in out["notes"]
    # why: c keeps its weight and its index (242 samples asked before and after), so the new blend starts where
    # the saved one stopped in it (greedy 105 of 420 either way); a and b are drawn from rebuilt indices
    rows = {s["name"]: (s["skipped_samples"], s["repeated_samples"], s["order_changed"]) for s in out["sources"]}
    assert rows == {"a": (None, None, True), "b": (None, None, True), "c": (0, 0, False)}
    assert [s["drawn_after_resume"] for s in out["sources"]] == [135, 270, 135]
    new.write_text(yaml.safe_dump(_blend_config(tmp_path, [2.0, 1.0, 1.0])))
    same = _cli(["resume-check", str(ckpt), str(new), "--json"])
    assert same.returncode == 0 and json.loads(same.stdout)["findings"] == []


def test_resume_check_without_saved_configs_says_what_it_cannot_compare(tmp_path):  # type: ignore[no-untyped-def]
    import yaml

    ckpt = _stock_checkpoint(tmp_path, None)
    new = tmp_path / "new.yml"
    new.write_text(yaml.safe_dump(_blend_config(tmp_path, [1.0, 2.0, 1.0])))
    r = _cli(["resume-check", str(ckpt), str(new), "--json"])
    out = json.loads(r.stdout)
    # why: without the saved configs nothing tells the saved blend; the same batch resumes where it stopped
    assert r.returncode == 0 and out["findings"] == [] and out["start_sample"] == 420
    assert any(n.startswith("no config files in the checkpoint") for n in out["notes"])
