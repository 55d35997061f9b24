"""`neox-epoch plan --write-config` (issue item 5): never overwrites an input, never writes a file NeoX would
refuse, says truthfully what the file needs, and `--full` writes one complete merged config; plus whether stock
NeoX (no plugin) is exact for the plan (`settings.stock_neox_exact`).

The corpus is the one of test_schedule.py: 96,745 tokens, seq_length 8 -> 12,093 samples per epoch, NeoX's
len 12,092 -> one exact pass is 3,023 iterations of 4.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest
import yaml

from neox_epoch.cli import main
from neox_epoch.demo import write_demo_corpus
from neox_epoch.formats.neox_config import load_neox_configs
from neox_epoch.plan.from_neox import plan_input_from_neox
from neox_epoch.plan.planner import make_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = [1000] * 95 + [1745]
BASE = {
    "seq_length": 8,
    "train_batch_size": 4,
    "train_micro_batch_size_per_gpu": 4,
    "warmup": 0.01,
    "eval_interval": 1000,
    "eval_iters": 10,
}


@pytest.fixture
def small(fixed_corpus: Any) -> str:
    return fixed_corpus("small", DOCS)


def write_cfg(path: Any, data: dict[str, Any]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return str(path)


def paths_cfg(prefix: str, **extra: Any) -> dict[str, Any]:
    return {"train_data_paths": [prefix], "valid_data_paths": [prefix], "test_data_paths": [prefix], **BASE, **extra}


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def refused(code: int, err: str, *parts: str) -> None:
    """Exit 2 and one stderr line (no traceback) naming the path, why and the fix."""
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for p in parts:
        assert p in err, err


def plan_files(files: list[str]) -> int:
    """train_iters of the files loaded with the project's NeoX loader (NeoX's merge rules) and planned."""
    from neox_epoch.plan.exact import exact_plan, passes_per_source

    cfg = load_neox_configs(files)
    inp = plan_input_from_neox(cfg)
    if cfg.block is not None and cfg.block.epochs is not None:
        return exact_plan(inp, passes_per_source(cfg.block.epochs, inp.train_sources)).train_iters
    return make_plan(inp).train_iters


# ----------------------------------------------------------------------------------------------------------
# refusals: nothing is written, the inputs are untouched


def test_refuses_an_input_file_by_any_spelling(
    small: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reported bug: --write-config configs/local_setup.yml overwrote the input. Same real path is refused,
    whether spelled the same, with ./, or through a symlink."""
    cfg = write_cfg(tmp_path / "configs" / "local_setup.yml", paths_cfg(small, neox_epoch={"epochs": 1}))
    before = open(cfg).read()
    monkeypatch.chdir(tmp_path)
    os.symlink("configs", "linked")
    for out in ("configs/local_setup.yml", "./configs/local_setup.yml", "linked/local_setup.yml"):
        code, _, err = run(["configs/local_setup.yml", "--write-config", out], capsys)
        refused(code, err, f'--write-config "{out}" is the input config', "write to another file")
    assert open(cfg).read() == before


def test_refuses_an_input_file_name(small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """NeoX refuses two config files with the same name (it saves them side by side with the checkpoint)."""
    cfg = write_cfg(tmp_path / "a" / "run.yml", paths_cfg(small, neox_epoch={"epochs": 1}))
    out = tmp_path / "b" / "run.yml"
    out.parent.mkdir()
    code, _, err = run([cfg, "--write-config", str(out)], capsys)
    refused(code, err, "has the same file name as the input config", "NeoX refuses two config files")
    assert not out.exists()


def test_refuses_a_directory_and_a_missing_directory(
    small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory is not a file; a missing parent is an error, not silently created."""
    cfg = write_cfg(tmp_path / "run.yml", paths_cfg(small, neox_epoch={"epochs": 1}))
    code, _, err = run([cfg, "--write-config", str(tmp_path)], capsys)
    refused(code, err, "is a directory; expected a file path")
    missing = tmp_path / "nope" / "exact.yml"
    code, _, err = run([cfg, "--write-config", str(missing)], capsys)
    refused(code, err, "does not exist; create it first")
    assert not missing.parent.exists()


def test_overlay_replaces_keys_the_inputs_set_with_the_dash_spelling(
    small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reported bug: train_iters and lr_decay_iters set in the input (as every real Pythia/StableLM config
    does) made --write-config refuse. NeoX's from_ymls checks a later file's key as written against the keys
    loaded so far (stored with '_'), so the overlay writes them as train-iters / lr-decay-iters, which replace
    the inputs' values; the files plus the overlay plan the exact 3023 iterations."""
    cfg = write_cfg(tmp_path / "run.yml", paths_cfg(small, train_iters=320000, lr_decay_iters=320000))
    out = tmp_path / "overlay.yml"
    code, _, err = run([cfg, "--epochs", "1", "--write-config", str(out)], capsys)
    assert code == 0, err
    data = yaml.safe_load(out.read_text())
    assert data == {"train-iters": 3023, "lr-decay-iters": 3023, "neox_epoch": {"epochs": 1, "blend_buffer": 1.0}}
    assert "written here with '-' (train-iters)" in out.read_text()
    assert plan_files([cfg, str(out)]) == 3023


def test_overlay_names_the_input_line_when_no_spelling_replaces_a_key(tmp_path: Any) -> None:
    """A key without '_' (warmup) has no spelling a later file may use: one line naming the file, the key, the
    value planned and the fix."""
    from neox_epoch.errors import ConfigError
    from neox_epoch.formats.neox_config import load_neox_configs
    from neox_epoch.plan.overlay import overlay_spelling

    cfg = load_neox_configs([write_cfg(tmp_path / "run.yml", {"warmup": 0.01, "train_iters": 5})], check_keys=False)
    assert overlay_spelling(cfg, {"train_iters": 7, "eval_interval": 3}, "W") == {"train-iters": 7, "eval_interval": 3}
    with pytest.raises(
        ConfigError,
        match=r"W: .*run.yml: warmup: 0.01; the plan needs 0.02.*change that line to "
        r"warmup: 0.02",
    ):
        overlay_spelling(cfg, {"warmup": 0.02}, "W")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--full"], "--full: goes with --write-config"),
        (
            ["--epochs", "1", "--seq-length", "16", "--write-config", "o.yml"],
            "--seq-length 16 overrides the config files",
        ),
        (["--write-config", "o.yml"], "writes the config of an exact plan; add --epochs N"),
    ],
)
def test_refuses_requests_that_cannot_give_a_correct_file(
    small: str,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
) -> None:
    """--full alone, a flag the written file could not carry, or no exact plan to write."""
    monkeypatch.chdir(tmp_path)
    cfg = write_cfg(tmp_path / "run.yml", paths_cfg(small, train_iters=10))
    code, _, err = run([cfg, *flags], capsys)
    refused(code, err, message)
    assert not (tmp_path / "o.yml").exists()


# ----------------------------------------------------------------------------------------------------------
# the overlay and the full config


def test_overlay_header_and_round_trip(small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The overlay needs neox-epoch launch or the patched deepy.py (stock NeoX rejects the neox_epoch key), and
    the config plus the overlay, loaded with the project's NeoX loader, plan the same 3023 iterations."""
    base = write_cfg(tmp_path / "base.yml", paths_cfg(small))
    out = tmp_path / "exact.yml"
    code, stdout, err = run([base, "--epochs", "1", "--write-config", str(out)], capsys)
    assert code == 0, err
    assert f"wrote {out} (overlay)" in stdout
    text = out.read_text()
    assert "Stock GPT-NeoX rejects the neox_epoch key" in text
    assert f"neox-epoch launch train.py {base} {out}" in text and "patches/neox_epoch_hook.patch" in text
    assert "give it to deepy.py" not in text
    data = yaml.safe_load(text)
    assert data == {"train_iters": 3023, "neox_epoch": {"epochs": 1, "blend_buffer": 1.0}}
    assert plan_files([base, str(out)]) == 3023
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmp")] == []  # atomic: no temp file left


def test_full_config_replaces_train_iters_and_the_schedule(
    small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two input files (NeoX merges them; a key in two files is an error) with train_iters 320000 and
    lr_decay_iters 320000: --full writes one file with train_iters 3023 and lr_decay_iters 3023 in place of the
    old values (not duplicated), the block, and every other key; it loads and plans to 3023 again."""
    model = write_cfg(
        tmp_path / "model.yml",
        {
            "train_iters": 320000,
            "lr_decay_iters": 320000,
            "lr_decay_style": "cosine",
            "save": "ckpt",
            "checkpoint_factor": 10000,
        },
    )
    setup = write_cfg(tmp_path / "local_setup.yml", paths_cfg(small))
    out = tmp_path / "exact_full.yml"
    code, stdout, err = run([model, setup, "--epochs", "1", "--write-config", str(out), "--full"], capsys)
    assert code == 0, err
    assert "(complete merged config)" in stdout
    text = out.read_text()
    assert "Use this file alone" in text and f"neox-epoch launch train.py {out}" in text
    assert "lr_decay_iters: 320000 -> 3023 (scaled)" in text  # the changes, in the header
    data = yaml.safe_load(text)
    assert (data["train_iters"], data["lr_decay_iters"], data["checkpoint_factor"]) == (3023, 3023, 10000)
    assert data["neox_epoch"] == {"epochs": 1, "blend_buffer": 1.0}
    assert list(data)[:2] == ["train_iters", "lr_decay_iters"]  # replaced in place, in merge order
    assert data["train_data_paths"] == [small] and data["seq_length"] == 8
    assert plan_files([str(out)]) == 3023
    code, stdout, err = run([str(out), "--json"], capsys)
    assert code == 0, err
    again = json.loads(stdout)
    assert again["train_iters"] == 3023
    assert {e["key"]: e["action"] for e in again["settings"]["schedule"]}["lr_decay_iters"] == "kept"


def test_full_config_drops_train_epochs(small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """train_epochs is replaced by train_iters: the full config does not carry it."""
    cfg = write_cfg(tmp_path / "run.yml", paths_cfg(small, train_epochs=2))
    out = tmp_path / "full.yml"
    code, _, err = run([cfg, "--epochs", "1", "--write-config", str(out), "--full"], capsys)
    assert code == 0, err
    data = yaml.safe_load(out.read_text())
    assert "train_epochs" not in data and data["train_iters"] == 3023
    assert plan_files([str(out)]) == 3023


# ----------------------------------------------------------------------------------------------------------
# stock NeoX without the plugin


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: Any) -> Any:
    d = tmp_path_factory.mktemp("demo")
    write_demo_corpus(str(d / "demo" / "data"))
    shutil.copytree(os.path.join(ROOT, "configs"), d / "configs")
    return d


def stock(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run([*args, "--json"], capsys)
    assert code == 0, err
    return dict(json.loads(out)["settings"]["stock_neox_exact"])


def test_stock_neox_exact_for_one_source(
    demo_dir: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """one_source_one_epoch.yml (train_data_paths): stock NeoX asks ceil(1232 * 1.005) = 1239 > 1234 samples per
    epoch and builds 2 epochs; with data_path, split 100,0,0 and train_iters 77 it asks 77 * 16 = 1232, builds one
    epoch and draws the plan's 1232. Checked by planning that stock config (no block) again."""
    monkeypatch.chdir(demo_dir)
    got = stock(["configs/one_source_one_epoch.yml"], capsys)
    assert got["exact"] is True
    assert got["config"] == {"data_path": "demo/data/web_text_document", "split": "100,0,0", "train_iters": 77}
    assert "no 1.005 factor" in got["why"] and "NeoX skips evaluation" in got["why"]
    stock_cfg = write_cfg(tmp_path / "stock.yml", {**got["config"], "seq_length": 512, "train_batch_size": 16})
    plan = json.loads(run([stock_cfg, "--json"], capsys)[1])
    (train,) = [s for s in plan["sources"] if s["split"] == "train"]
    assert (train["epochs_built"], train["samples_drawn"], plan["train_iters"]) == (1, 1232, 77)
    code, out, _ = run(["configs/one_source_one_epoch.yml"], capsys)
    assert "stock NeoX without neox-epoch:\n  exact with data_path: 'demo/data/web_text_document'" in out


def test_stock_neox_exact_for_data_path_split(
    demo_dir: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """data_path_split.yml is already data_path mode: the config as it is, with train_iters 292, is exact."""
    monkeypatch.chdir(demo_dir)
    got = stock(["configs/data_path_split.yml"], capsys)
    assert got["exact"] is True and got["config"]["split"] == "949,50,1" and got["config"]["train_iters"] == 292


def test_stock_neox_not_exact_for_a_blend_or_two_passes(
    demo_dir: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A blend always has the 1.005 factor; two passes of one source build a 2-epoch index: never claimed."""
    monkeypatch.chdir(demo_dir)
    got = stock(["configs/blend_per_source_epochs.yml"], capsys)
    assert got["exact"] is False and "a blend of 3 sources" in got["why"] and "config" not in got
    got = stock(["configs/data_path_split.yml", "--epochs", "2"], capsys)
    assert got["exact"] is False and "holds 2 epochs shuffled together, not one" in got["why"]


def test_weight_by_num_documents_exact_mode_writes_explicit_weights(
    small: str, fixed_corpus: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reported case: weight_by_num_documents: true (with weighted_sampler_alpha) made exact mode fail with
    "no float weights found ... use megatron-core's exhaustive blending". NeoX's document-count weights cannot
    draw one pass of each source; exact mode now finds explicit weights, writes them in the block with
    weight-by-num-documents: false (the dash spelling replaces the input's key), and says so. Without exact
    mode the plan keeps NeoX's document-count weights."""
    other = fixed_corpus("other", [300] * 200 + [77])
    cfg = write_cfg(
        tmp_path / "run.yml",
        {
            "train_data_paths": [small, other],
            "valid_data_paths": [small],
            "test_data_paths": [small],
            **BASE,
            "weight-by-num-documents": True,
            "weighted_sampler_alpha": 0.5,
        },
    )
    out = tmp_path / "exact.yml"
    code, stdout, err = run([cfg, "--epochs", "1", "--write-config", str(out), "--json"], capsys)
    assert code == 0, err
    plan = json.loads(stdout)
    assert any(
        w["code"] == "exact-weights" and "weight_by_num_documents: true -> false" in w["text"] for w in plan["warnings"]
    ), plan["warnings"]
    data = yaml.safe_load(out.read_text())
    assert data["weight-by-num-documents"] is False and len(data["neox_epoch"]["weights"]) == 2
    assert [s["samples_drawn"] for s in plan["sources"] if s["split"] == "train"] == list(
        data["neox_epoch"]["targets"].values()
    )
    assert plan_files([cfg, str(out)]) == data["train_iters"] == plan["train_iters"]
    full = tmp_path / "full.yml"
    assert run([cfg, "--epochs", "1", "--write-config", str(full), "--full"], capsys)[0] == 0
    assert yaml.safe_load(full.read_text())["weight_by_num_documents"] is False
    iters = write_cfg(tmp_path / "iters.yml", {"train-iters": 100})
    code, stdout, err = run([cfg, iters, "--json"], capsys)  # not exact: NeoX's own document-count weights
    assert code == 0, err
    assert not any(w["code"] == "exact-weights" for w in json.loads(stdout)["warnings"])


def test_a_prefix_listed_twice_in_a_blend_is_named(
    small: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reported case: a prefix listed twice in a blend showed two rows of ~1 pass each. It is now one row (its
    draws summed, the distinct ones beside them: both copies are built for one epoch, so NeoX gives them one
    shuffle and the larger copy's draws are all that is distinct) and a `repeated-prefix` warning names it."""
    cfg = write_cfg(
        tmp_path / "run.yml",
        {**paths_cfg(small), "train_data_paths": [small, small], "train_data_weights": [1, 1], "train_iters": 3000},
    )
    code, stdout, err = run([cfg, "--json"], capsys)
    assert code == 0, err
    plan = json.loads(stdout)
    rows = [s for s in plan["sources"] if s["split"] == "train"]
    found = [w["text"] for w in plan["warnings"] if w["code"] == "repeated-prefix"]
    assert [(r["copies"], r["samples_drawn"], r["samples_distinct"]) for r in rows] == [(2, 12000, 6000)], rows
    spe = rows[0]["samples_per_epoch"]
    assert found == [
        f"train: {small} is listed 2 times in the blend: NeoX builds 2 datasets with the same shuffle, so the later "
        f"copies re-train the first samples: 6000 distinct of 12000 drawn ({6000 / spe:.4f} of {12000 / spe:.4f} "
        "passes); list it once with the weights added"
    ], found
    assert rows[0]["passes"] == round(12000 / spe, 6)
    code, stdout, _ = run(
        [write_cfg(tmp_path / "one.yml", {**paths_cfg(small), "train_iters": 3000}), "--json"], capsys
    )
    assert code == 0 and not [w for w in json.loads(stdout)["warnings"] if w["code"] == "repeated-prefix"]
