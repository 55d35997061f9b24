"""How ``neox-epoch plan`` reads NeoX configs the way NeoX's ``NeoXArgs.from_ymls`` and ``calculate_derived`` do.

Key spelling across files (NeoX compares the key as written with the keys loaded so far, stored with ``_``),
keys NeoX removed, empty files, the world from a hostfile / launcher flags / ``global_num_gpus`` /
``--world-size`` / ``$DLTS_HOSTFILE``, NeoX's batch derivation and checks, and the torch-free hostfile path
(which must agree with DeepSpeed's own functions). Against real NeoX (tests/helpers/frameworks.py), the spelling rules
are
also checked against NeoX's real from_ymls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import optional
import pytest
import yaml

from neox_epoch.batch.config import LauncherSettings
from neox_epoch.batch.neox import neox_batch
from neox_epoch.cli import main
from neox_epoch.errors import ConfigError
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.neox_config import RENAMED_KEYS, load_neox_configs

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
SWEEP_SCRIPT = os.path.join(HERE, "..", "scripts", "neox_config_sweep.py")
#: the smallest config NeoX accepts (model keys NeoX requires, a batch, a data prefix)
BASE: dict[str, Any] = {
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "seq_length": 128,
    "max_position_embeddings": 128,
    "train_micro_batch_size_per_gpu": 4,
    "data_path": "data/x",
}


def write(path: Any, content: Any) -> str:
    """Write ``content`` (a mapping, as YAML; or text) and return the path."""
    text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


@pytest.fixture(autouse=True)
def no_dlts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DLTS_HOSTFILE", raising=False)
    if os.path.exists("/job/hostfile"):
        pytest.skip("/job/hostfile exists on this machine: NeoX (and the planner) would read it")


@pytest.fixture
def cwd(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """A working directory with a small corpus at data/x and hostfiles hostfile_N (N = 1, 8, 16)."""
    monkeypatch.chdir(tmp_path)
    os.makedirs("data")
    write_random_corpus("data/x", 0, 300, 50, 400)
    write("hostfile_1", "localhost slots=1\n")
    write("hostfile_8", "node0 slots=8\n")
    write("hostfile_16", "# two nodes\nnode0 slots=8\n\nnode1 slots=8\n")
    return tmp_path


def plan(argv: list[str], capsys) -> tuple[int, dict[str, Any] | None, str]:  # type: ignore[no-untyped-def]
    code = main(["plan", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


# ---------------------------------------------------------------------------------------------------------
# Key spelling across files, as from_ymls


SPELLING_CASES = {
    # name: (first file's key, second file's key, NeoX refuses?)
    "dash_then_underscore": ("train-iters", "train_iters", True),
    "underscore_then_underscore": ("train_iters", "train_iters", True),
    "underscore_then_dash": ("train_iters", "train-iters", False),
    "dash_then_dash": ("train-iters", "train-iters", False),
}


@pytest.mark.parametrize("name", sorted(SPELLING_CASES))
def test_key_in_two_files_like_from_ymls(name, cwd, capsys):  # type: ignore[no-untyped-def]
    first, second, refused = SPELLING_CASES[name]
    a = write(cwd / "a.yml", {**BASE, "hostfile": "hostfile_8", first: 100})
    b = write(cwd / "b.yml", {second: 7})
    code, out, err = plan([a, b], capsys)
    if refused:
        assert code == 2 and err.count("\n") == 1, err
        assert f"b.yml: {second}: already set in" in err and "key given twice" in err
    else:
        assert code == 0, err
        assert out is not None and out["train_iters"] == 7  # NeoX keeps the later value
        assert any("replaces" in n and "keeps the later value" in n for n in out["config_notes"])


def test_both_spellings_in_one_file(cwd):  # type: ignore[no-untyped-def]
    """One file with ``lr-decay-iters`` then ``lr_decay_iters``: NeoX stops (the second is already loaded)."""
    a = write(cwd / "a.yml", '{"lr-decay-iters": 10, "lr_decay_iters": 20}\n')
    with pytest.raises(ConfigError, match=r"a.yml: lr_decay_iters: already set in .*a.yml \(as lr-decay-iters\)"):
        load_neox_configs([a])
    b = write(cwd / "b.yml", '{"lr_decay_iters": 10, "lr-decay-iters": 20}\n')
    assert load_neox_configs([b]).values["lr_decay_iters"] == 20


def test_same_basename_is_checked_after_the_keys(cwd):  # type: ignore[no-untyped-def]
    os.makedirs(cwd / "x")
    os.makedirs(cwd / "y")
    a = write(cwd / "x" / "c.yml", {"seed": 1})
    b = write(cwd / "y" / "c.yml", {"seed": 2})
    with pytest.raises(ConfigError, match="seed: already set in"):  # NeoX reads the keys before the name check
        load_neox_configs([a, b])
    b = write(cwd / "y" / "c.yml", {"eval_iters": 2})
    with pytest.raises(ConfigError, match="same file name as"):
        load_neox_configs([a, b])


def test_empty_file_is_refused_like_neox(cwd):  # type: ignore[no-untyped-def]
    e = write(cwd / "empty.yml", "# nothing\n")
    with pytest.raises(ConfigError, match=r"empty.yml: is empty; NeoX stops on an empty config file"):
        load_neox_configs([e])


@pytest.mark.parametrize("old", sorted(RENAMED_KEYS))
def test_removed_key_names_its_replacement(old, cwd, capsys):  # type: ignore[no-untyped-def]
    a = write(cwd / "a.yml", {**BASE, "hostfile": "hostfile_8", "train_iters": 10, old: 1})
    code, _, err = plan([a], capsys)
    new = RENAMED_KEYS[old][0]
    assert code == 2 and err.count("\n") == 1
    assert f"a.yml: {old}: NeoX no longer accepts this key" in err and f"use {new}" in err


def test_first_unknown_key_in_merged_order(cwd):  # type: ignore[no-untyped-def]
    """NeoX's TypeError names the first unexpected keyword of the merged dict (file order, first spelling)."""
    a = write(cwd / "a.yml", {"seed": 1, "train_iter": 5})
    b = write(cwd / "b.yml", {"eval_iter": 5})
    with pytest.raises(ConfigError, match=r"a.yml: train_iter: unknown NeoX config key \(did you mean \"train_iters\""):
        load_neox_configs([a, b])


def test_train_data_paths_string_is_refused_like_neox(cwd, capsys):  # type: ignore[no-untyped-def]
    cfg = {k: v for k, v in BASE.items() if k != "data_path"}
    a = write(
        cwd / "a.yml",
        {
            **cfg,
            "global_num_gpus": 1,
            "train_iters": 5,
            "train_data_paths": "data/x",
            "valid_data_paths": ["data/x"],
            "test_data_paths": ["data/x"],
        },
    )
    code, _, err = plan([a], capsys)
    assert code == 2 and "train_data_paths: expected a list of path prefixes" in err and '["data/x"]' in err


def test_boolean_keys_must_be_booleans_like_neox(cwd, capsys):  # type: ignore[no-untyped-def]
    a = write(cwd / "a.yml", {**BASE, "global_num_gpus": 1, "train_iters": 5, "allow_chopped": "false"})
    code, _, err = plan([a], capsys)
    assert code == 2 and "allow_chopped: expected true or false, found str 'false'" in err


# ---------------------------------------------------------------------------------------------------------
# The world and the batch, as calculate_derived


@pytest.mark.parametrize(
    "flags,world",
    [
        (["--hostfile", "hostfile_16"], 16),
        (["--hostfile", "hostfile_16", "--num_nodes", "1"], 8),
        (["--hostfile", "hostfile_16", "--num_gpus", "2"], 4),  # num_gpus * hosts
        # include/exclude: DeepSpeed's own filter
        pytest.param(["--hostfile", "hostfile_16", "--include", "node1:0,1"], 2, marks=optional.needs("deepspeed")),
        pytest.param(
            ["--hostfile", "hostfile_16", "--include", "node1:0,1", "--num_gpus", "4"],
            4,  # num_gpus * hosts
            marks=optional.needs("deepspeed"),
        ),
        (["--world-size", "32"], 32),
        (["--hostfile", "hostfile_16", "--world-size", "32"], 32),  # --world-size overrides NeoX's count
    ],
)
def test_world_from_launcher_flags(flags, world, cwd, capsys):  # type: ignore[no-untyped-def]
    a = write(cwd / "a.yml", {**BASE, "train_iters": 10})
    code, out, err = plan([a, *flags], capsys)
    assert code == 0, err
    assert out is not None and out["global_batch_size"] == 4 * world
    assert any(f"NeoX counts {world} GPUs" in n for n in out["config_notes"])


def test_world_from_config_keys_flags_win(cwd, capsys):  # type: ignore[no-untyped-def]
    a = write(cwd / "a.yml", {**BASE, "train_iters": 10, "hostfile": "hostfile_16", "num_nodes": 1})
    assert plan([a], capsys)[1]["global_batch_size"] == 32  # type: ignore[index]
    assert plan([a, "--hostfile", "hostfile_1"], capsys)[1]["global_batch_size"] == 4  # type: ignore[index]
    g = write(cwd / "g.yml", {**BASE, "train_iters": 10, "global_num_gpus": 3, "hostfile": "hostfile_16"})
    assert plan([g], capsys)[1]["global_batch_size"] == 12  # type: ignore[index]


def test_world_from_dlts_hostfile(cwd, capsys, monkeypatch):  # type: ignore[no-untyped-def]
    a = write(cwd / "a.yml", {**BASE, "train_iters": 10})
    monkeypatch.setenv("DLTS_HOSTFILE", "hostfile_16")
    assert plan([a], capsys)[1]["global_batch_size"] == 64  # type: ignore[index]


def test_no_world_says_how_to_give_it(cwd, capsys, monkeypatch):  # type: ignore[no-untyped-def]
    """No hostfile and no GPU (or no torch): NeoX would count 0 GPUs; the message names the ways to give the world
    and says that num_gpus alone does not count (NeoX ignores it without a hostfile)."""
    monkeypatch.setattr("neox_epoch.batch.neox_count._cuda_device_count", lambda: 0)
    a = write(cwd / "a.yml", {**BASE, "train_iters": 10, "num_gpus": 8})
    code, _, err = plan([a], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "NeoX counts 0 GPUs with torch.cuda.device_count()" in err and "--hostfile FILE" in err
    assert "num_gpus 8 count only with a hostfile" in err
    missing = write(cwd / "m.yml", {**BASE, "train_iters": 10, "hostfile": "/mock_path"})
    code, _, err = plan([missing], capsys)
    assert code == 2 and "hostfile /mock_path does not exist" in err


def test_device_count_is_neox_s_count_without_hostfile(cwd, capsys, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr("neox_epoch.batch.neox_count._cuda_device_count", lambda: 2)
    a = write(cwd / "a.yml", {**BASE, "train_iters": 10, "num_gpus": 8})  # num_gpus ignored, as in NeoX
    assert plan([a], capsys)[1]["global_batch_size"] == 8  # type: ignore[index]


def test_train_batch_size_alone_needs_no_world(cwd, capsys):  # type: ignore[no-untyped-def]
    cfg = {k: v for k, v in BASE.items() if k != "train_micro_batch_size_per_gpu"}
    a = write(cwd / "a.yml", {**cfg, "train_batch_size": 48, "train_iters": 10})
    code, out, err = plan([a], capsys)
    assert code == 0 and out is not None and out["global_batch_size"] == 48, err


@pytest.mark.parametrize(
    "keys,message",
    [
        (
            {"train_batch_size": 64},
            r"train_batch_size 64 != micro \* grad_accum \* dp = 4 \* 1 \* 8 = 32.*NeoX stops: "
            r"'Check batch related parameters",
        ),  # gas defaults to 1 in NeoX: all three are given
        (
            {"train_batch_size": 64, "gradient_accumulation_steps": None, "train_micro_batch_size_per_gpu": 16},
            r"Gradient accumulation steps: 0 has to be greater than 0",
        ),
        ({"model_parallel_size": 3}, r"= 8 / \(1 \* 3\) = 2.66667 is not a whole number"),
        (
            {"train_micro_batch_size_per_gpu": None},
            "neither train_batch_size nor train_micro_batch_size_per_gpu is set",
        ),
    ],
)
def test_neox_batch_refusals(keys, message, cwd, capsys):  # type: ignore[no-untyped-def]
    a = write(cwd / "a.yml", {**BASE, "train_iters": 10, "hostfile": "hostfile_8", **keys})
    code, _, err = plan([a], capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    import re

    assert re.search(message, err), err


def test_gas_null_derives_like_neox(cwd):  # type: ignore[no-untyped-def]
    """gradient_accumulation_steps: null -> NeoX derives it: tbs 64, micro 4 on 8 GPUs -> 2."""
    a = write(
        cwd / "a.yml", {**BASE, "train_batch_size": 64, "gradient_accumulation_steps": None, "hostfile": "hostfile_8"}
    )
    b = neox_batch(load_neox_configs([a]))
    assert (b.train_batch_size, b.micro_batch_size, b.gradient_accumulation_steps, b.data_parallel_size) == (
        64,
        4,
        2,
        8,
    )


def test_bad_hostfile_is_one_line(cwd, capsys):  # type: ignore[no-untyped-def]
    write(cwd / "bad_hosts", "node0 slots=8\nnode0 slots=8\n")
    a = write(cwd / "a.yml", {**BASE, "train_iters": 10, "hostfile": "bad_hosts"})
    code, _, err = plan([a], capsys)
    assert code == 2 and "Hostfile contains multiple entries for node0" in err and err.count("\n") == 1


def test_plan_with_hostfile_imports_neither_torch_nor_deepspeed(cwd):  # type: ignore[no-untyped-def]
    """A hostfile alone is read without DeepSpeed (whose import pulls in torch): plan stays a one-second tool."""
    a = write(cwd / "a.yml", {**BASE, "train_iters": 10, "hostfile": "hostfile_16"})
    code = (
        "import sys; from neox_epoch.cli import main; rc = main(['plan', sys.argv[1], '--json', '--num_nodes', "
        "'1']); heavy = [m for m in ('torch', 'deepspeed') if m in sys.modules]; print('HEAVY', heavy); "
        "sys.exit(rc)"
    )
    env = {**os.environ, "PYTHONPATH": os.path.join(HERE, "..")}
    out = subprocess.run([sys.executable, "-c", code, a], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout and '"global_batch_size": 32' in out.stdout


# ---------------------------------------------------------------------------------------------------------
# The torch-free hostfile reader against DeepSpeed's fetch_hostfile / parse_inclusion_exclusion


HOSTFILES = {
    "two_nodes": "node0 slots=8\nnode1 slots=8\n",
    "comments_blank_lines": "# cluster\n\n  node0 slots=4  \n#node9 slots=8\nnode1 slots=2 extra words\n",
    "uneven": "a slots=8\nb slots=4\nc slots=0\n",
    "localhost": "localhost slots=3\n",
    "duplicate_host": "node0 slots=8\nnode0 slots=8\n",
    "bad_line": "node0 slots=8\nnode1 8\n",
    "only_comments": "# nothing\n\n",
}
SETTINGS = {
    "plain": {},
    "num_nodes": {"num_nodes": 2},
    "num_gpus": {"num_gpus": 2},
    "both": {"num_nodes": 1, "num_gpus": 16},
    "num_nodes_0": {"num_nodes": 0, "num_gpus": 0},
}


def _count(settings: LauncherSettings, use_deepspeed: bool, cuda: int = 0) -> Any:
    from neox_epoch.batch.neox_count import neox_gpu_count

    try:
        c = neox_gpu_count(settings, use_deepspeed=use_deepspeed, cuda_device_count=cuda, environ={})
    except ConfigError as err:
        return ("error", str(err))
    return (c.count, c.hosts, c.basis)


@optional.needs("deepspeed")  # the torch-free count is compared with the DeepSpeed path
@pytest.mark.parametrize("hostfile", sorted(HOSTFILES))
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_torch_free_hostfile_count_equals_deepspeed_path(hostfile, setting, tmp_path):  # type: ignore[no-untyped-def]
    path = write(tmp_path / "hosts", HOSTFILES[hostfile])
    s = LauncherSettings(hostfile=path, **SETTINGS[setting])
    assert _count(s, use_deepspeed=False) == _count(s, use_deepspeed=True)


@optional.needs("deepspeed")
@pytest.mark.parametrize("cuda", [0, 2])
def test_missing_hostfile_falls_back_to_device_count_on_both_paths(cuda, tmp_path):  # type: ignore[no-untyped-def]
    s = LauncherSettings(hostfile=str(tmp_path / "absent"), num_gpus=1)
    assert _count(s, False, cuda) == _count(s, True, cuda)
    assert _count(s, False, cuda)[0] == (1 if cuda else 0)


@optional.needs("deepspeed")
def test_default_hostfile_is_deepspeed_s():
    from neox_epoch.batch.deepspeed_import import deepspeed_runner
    from neox_epoch.batch.hostfile import DEFAULT_HOSTFILE

    assert deepspeed_runner().DLTS_HOSTFILE == DEFAULT_HOSTFILE


# ---------------------------------------------------------------------------------------------------------
# Against NeoX itself


@pytest.mark.neox
@pytest.mark.parametrize("name", sorted(SPELLING_CASES))
def test_spelling_rules_equal_neox_from_ymls(name, cwd, capsys):  # type: ignore[no-untyped-def]
    first, second, _ = SPELLING_CASES[name]
    a = write(cwd / "a.yml", {**BASE, "hostfile": "hostfile_8", first: 100})
    b = write(cwd / "b.yml", {second: 7})
    import frameworks

    r = subprocess.run(
        [frameworks.neox_python(), SWEEP_SCRIPT, "--neox-dir", frameworks.neox_dir(), "--one", "a.yml", "b.yml"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    neox = json.loads(r.stdout)
    code, out, err = plan([a, b], capsys)
    assert (code == 0) == neox["accepted"], (neox, err)
    if neox["accepted"]:
        assert out is not None and out["train_iters"] == neox["neox"]["train_iters"]
        assert out["global_batch_size"] == neox["neox"]["train_batch_size"]


def test_check_batch_without_deepspeed_says_what_to_install(cwd):  # type: ignore[no-untyped-def]
    """On the core install check-batch (which asks DeepSpeed's own code) exits 2 with one line naming the
    missing package and the install, not an internal error (deepspeed hidden here with sys.modules[...] = None,
    which makes its import raise ModuleNotFoundError exactly as when it is not installed)."""
    a = write(cwd / "a.yml", {**BASE, "train_iters": 10})
    code = (
        "import sys; sys.modules['deepspeed'] = None; from neox_epoch.cli import main; "
        f"sys.exit(main(['check-batch', {a!r}, '--num_gpus', '1']))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("neox-epoch check-batch: error: deepspeed is not installed for ")
    assert "pip install torch==2.13.0 deepspeed" in r.stderr


@pytest.mark.parametrize(
    ("attention", "message"),
    [
        (
            [[["flash"], 1]],
            'covers 1 layers, num_layers is 2 (in a.yml); NeoX stops: "Length of attention config list '
            'must equal num_layers": make the counts add up to 2',
        ),
        ([[["global"], 1], [["local"], 2]], "covers 3 layers, num_layers is 2"),
        ([[["flashy"], 2]], "attention type 'flashy' is not one NeoX knows"),
    ],
)
def test_attention_config_must_cover_num_layers_like_neox(attention, message, cwd, capsys):  # type: ignore[no-untyped-def]
    """The reported case: pythia-12b-deduped has 40 layers and an attention config covering 36, which NeoX's
    calculate_derived refuses; plan accepted it."""
    write(cwd / "a.yml", {**BASE, "global_num_gpus": 1, "train_iters": 5, "attention_config": attention})
    code, _, err = plan(["a.yml"], capsys)
    assert code == 2 and err.count("\n") == 1 and f"a.yml: attention_config: {message}" in err, err
    ok = write(
        cwd / "b.yml",
        {**BASE, "global_num_gpus": 1, "train_iters": 5, "attention_config": [[["global", "flash"], "all"]]},
    )
    assert plan([ok], capsys)[0] == 0


#: data keys: extra keys (on BASE without data_path), NeoX's words (None: NeoX accepts), words our line adds
PATHS = {"train_data_paths": ["data/x"], "valid_data_paths": ["data/x"], "test_data_paths": ["data/x"]}
EITHER, MISSING = "Please provide *either* `data_path` or", "One or more of train/valid/test data_path are not provided"
DATA_KEY_CASES: dict[str, tuple[dict[str, Any], str | None, str]] = {
    "data_path_and_the_three": ({**PATHS, "data_path": "data/x"}, EITHER, "remove data_path, or the three"),
    "train_without_valid_test": ({"train_data_paths": ["data/x"]}, MISSING, "set valid_data_paths and test_data_paths"),
    "train_and_valid_without_test": (
        {"train_data_paths": ["data/x"], "valid_data_paths": ["data/x"]},
        MISSING,
        "given without test_data_paths",
    ),
    "the_three": (PATHS, None, ""),
    "a_zero_weight": ({**PATHS, "train_data_paths": ["data/x", "data/y"], "train_data_weights": [1, 0]}, None, ""),
    "data_path": ({"data_path": "data/x"}, None, ""),
    "dpo_pairs": (
        {
            "train_impl": "dpo",
            "dataset_impl": "pairwise",
            "pos_train_data_paths": ["data/x"],
            "neg_train_data_paths": ["data/x"],
        },
        None,
        "trains with train_impl: dpo on preference pairs",
    ),
}


@pytest.mark.neox
def test_data_keys_are_judged_like_neox_from_ymls(cwd, capsys):  # type: ignore[no-untyped-def]
    """The reported cases: data_path together with train_data_paths, and train paths without valid/test paths,
    were planned though NeoX's validate_values refuses them; a DPO config with only pos_/neg_ paths got "none of
    data_path or train_data_paths is set"; weights [1, 0] were refused though NeoX runs them (the second source
    is never drawn). NeoX's own from_ymls judges each (one NeoX process); plan accepts what
    it accepts with its train_iters, refuses the rest in one line with NeoX's words and the fix, and names the
    training method of a preference-pair config (NeoX accepts it; not planned here, and said so)."""
    import frameworks

    model = {k: v for k, v in BASE.items() if k != "data_path"}
    for ext in (".bin", ".idx"):
        os.symlink(os.path.abspath("data/x" + ext), "data/y" + ext)
    jobs = {}
    for name, (extra, _, _) in DATA_KEY_CASES.items():
        write(cwd / f"{name}.yml", {**model, "hostfile": "hostfile_8", "train_iters": 5, **extra})
        jobs[name] = [f"{name}.yml"]
    neox = frameworks.neox_from_ymls(str(cwd), jobs, timeout=600)
    for name, (_, neox_words, ours) in DATA_KEY_CASES.items():
        code, out, err = plan([f"{name}.yml"], capsys)
        assert neox[name]["accepted"] == (neox_words is None), (name, neox[name])
        if neox_words is not None:
            assert neox_words in neox[name]["error"]["message"], neox[name]
            assert code == 2 and err.count("\n") == 1 and neox_words in err and ours in err, (name, err)
        elif ours:
            assert code == 2 and err.count("\n") == 1 and ours in err, (name, err)
        else:
            assert code == 0 and out is not None and out["train_iters"] == neox[name]["neox"]["train_iters"], err
            if name == "a_zero_weight":  # 5 iterations of 4 x 8 samples, none from the source weighted 0
                assert [s["samples_drawn"] for s in out["sources"] if s["split"] == "train"] == [160, 0]
    code, _, err = plan(
        [
            write(
                cwd / "zeros.yml",
                {**model, "hostfile": "hostfile_8", "train_iters": 5, **PATHS, "train_data_weights": [0]},
            )
        ],
        capsys,
    )
    assert code == 2 and "expected weights >= 0 with a sum > 0" in err, err


#: (a line added to a valid config, as YAML text; NeoX accepts it?)
TYPE_CASES = {
    "min_lr_without_a_dot": ("min_lr: 6e-05", False),
    "min_lr_with_a_dot": ("min_lr: 6.0e-05", True),
    "min_lr_an_int": ("min_lr: 0", True),
    "tokenizer_unknown": ("tokenizer_type: Llama3HFTokenizer", False),
    "tokenizer_other_case": ("tokenizer_type: hftokenizer", True),
    "eval_interval_quoted": ("eval_interval: '100'", False),
    "checkpoint_factor_float": ("checkpoint_factor: 2.5", True),
    "a_bool_as_a_string": ("allow_chopped: 'true'", False),
}


@pytest.mark.neox
def test_value_types_are_judged_like_neox_validate_types(cwd, capsys):  # type: ignore[no-untyped-def]
    """The reported cases: `tokenizer_type: Llama3HFTokenizer` and `min_lr: 6e-05` (a string to PyYAML: YAML 1.1
    floats need a dot) were planned though NeoX's validate_types refuses them. Judged by NeoX's own from_ymls
    (one NeoX process): plan accepts what it accepts, and refuses the rest in one line naming the key and the fix."""
    import frameworks

    base = yaml.safe_dump({**BASE, "hostfile": "hostfile_8", "train_iters": 5}, sort_keys=False)
    jobs = {}
    for name, (line, _) in TYPE_CASES.items():
        write(cwd / f"{name}.yml", base + line + "\n")
        jobs[name] = [f"{name}.yml"]
    neox = frameworks.neox_from_ymls(str(cwd), jobs, timeout=600)
    for name, (line, accepted) in TYPE_CASES.items():
        assert neox[name]["accepted"] == accepted, (name, neox[name])
        code, out, err = plan([f"{name}.yml"], capsys)
        key = line.split(":")[0]
        if accepted:
            assert code == 0 and out is not None and out["train_iters"] == neox[name]["neox"]["train_iters"], err
        else:
            said = " ".join(neox[name]["error"]["logged_errors"] + [neox[name]["error"]["message"]])
            assert "validate_types" in said or "has no attribute '__origin__'" in said, said  # NeoX's own words
            words = "Not in accepted values" if "Not in accepted values" in said else "has no attribute '__origin__'"
            assert words in said and words in err, (said, err)
            assert code == 2 and err.count("\n") == 1 and f"{name}.yml: {key}: " in err and "validate_types" in err, err
    assert (
        "(write 6.0e-05: PyYAML reads 6e-05 as a string, YAML 1.1 floats need a dot)"
        in plan(["min_lr_without_a_dot.yml"], capsys)[2]
    )
