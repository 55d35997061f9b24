"""`neox-epoch plan` end to end: shipped configs plan, JSON keys are stable, bad input is one line, exit 2."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from neox_epoch.cli import main
from neox_epoch.demo import write_demo_corpus
from neox_epoch.formats.detect import VERIFIED_MCORE_VERSIONS
from neox_epoch.formats.detect import megatron_core_version as installed_mcore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = sorted(f for f in os.listdir(os.path.join(ROOT, "configs")) if f.endswith(".yml"))
SOURCE_KEYS = {
    "name",
    "prefix",
    "split",
    "documents",
    "tokens",
    "samples_per_epoch",
    "samples_requested",
    "epochs_built",
    "samples_drawn",
    "passes",
    "tokens_unseen",
}


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """The shipped configs use demo/data/... relative paths: run them from a dir holding the demo corpus."""
    d = tmp_path_factory.mktemp("demo")
    write_demo_corpus(str(d / "demo" / "data"))
    shutil.copytree(os.path.join(ROOT, "configs"), d / "configs")
    return d


def run_cli(args, capsys):  # type: ignore[no-untyped-def]
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("config", CONFIGS)
def test_every_shipped_config_plans(demo_dir, config, capsys, monkeypatch):
    """Each shipped config gives a table and a JSON plan whose train draws hit the config's targets exactly."""
    monkeypatch.chdir(demo_dir)
    code, out, err = run_cli(["plan", f"configs/{config}"], capsys)
    assert code == 0, err
    assert "samples/epoch" in out and "train_iters" in out
    code, out, _ = run_cli(["plan", f"configs/{config}", "--json"], capsys)
    plan = json.loads(out)
    assert {
        "framework",
        "framework_version",
        "seq_length",
        "global_batch_size",
        "train_iters",
        "warnings",
        "sources",
    } <= set(plan)
    assert plan["framework"] == "neox"
    for s in plan["sources"]:
        assert SOURCE_KEYS <= set(s)
    train = [s for s in plan["sources"] if s["split"] == "train"]
    assert all(s["samples_drawn"] == s["target_samples"] for s in train)
    assert plan["train_iters"] * plan["global_batch_size"] == sum(s["samples_drawn"] for s in train)
    assert plan["settings"]["neox_overlay"]["train_iters"] == plan["train_iters"]


def test_one_source_one_epoch_numbers(demo_dir, capsys, monkeypatch):
    """web: 632,167 tokens, seq 512 -> (632167-1)//512 = 1234 samples/epoch; NeoX len = 1233 -> 77 iterations
    of 16 = 1232 samples; stock NeoX would ask ceil(1232*1.005) = 1239 > 1234 and build 2 epochs."""
    monkeypatch.chdir(demo_dir)
    code, out, _ = run_cli(["plan", "configs/one_source_one_epoch.yml", "--json"], capsys)
    plan = json.loads(out)
    (train,) = [s for s in plan["sources"] if s["split"] == "train"]
    assert (train["tokens"], train["samples_per_epoch"], plan["train_iters"]) == (632167, 1234, 77)
    assert (train["samples_requested"], train["epochs_built"], train["samples_drawn"]) == (1232, 1, 1232)
    assert plan["remainder"] == {"samples": 1, "tokens": 512}
    assert any(
        w["code"] == "without-plugin"
        and "without neox-epoch: NeoX asks web_text_document for 1239 samples" in w["text"]
        for w in plan["warnings"]
    )


def test_write_config_overlay(demo_dir, capsys, monkeypatch, tmp_path):
    import yaml

    monkeypatch.chdir(demo_dir)
    out_file = tmp_path / "overlay.yml"
    code, _, _ = run_cli(["plan", "configs/blend_per_source_epochs.yml", "--write-config", str(out_file)], capsys)
    assert code == 0
    overlay = yaml.safe_load(out_file.read_text())
    assert overlay["train_iters"] == 187
    # the 9-sample remainder under one global batch comes off the half-pass source, so web (1 pass, NeoX's
    # len = samples - 1 = 1233) and code (2 passes: (2*383380 - 1)//512 - 1 = 1496) stay exact
    assert overlay["neox_epoch"]["targets"] == {
        "web_text_document": 1233,
        "code_text_document": 1496,
        "books_text_document": 263,
    }


def test_megatron_flags(demo_dir, capsys, monkeypatch):
    monkeypatch.chdir(demo_dir)
    code, out, err = run_cli(
        [
            "plan",
            "--framework-version",
            "0.16.1",
            "--data-path",
            "demo/data/web_text_document",
            "--split",
            "98,1,1",
            "--seq-length",
            "512",
            "--global-batch-size",
            "16",
            "--micro-batch-size",
            "4",
            "--world-size",
            "4",
            "--num-layers",
            "2",
            "--lr",
            "3e-4",
            "--train-iters",
            "50",
            "--eval-iters",
            "1",
            "--eval-interval",
            "25",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    plan = json.loads(out)
    assert plan["framework"] == "megatron-core" and plan["framework_version"] == "0.16.1"
    assert [s["split"] for s in plan["sources"]] == ["train", "valid", "test"]
    assert plan["sources"][0]["samples_requested"] == 800  # one prefix without weight: no buffer
    # Megatron-LM: valid = (50 // 25 + 1) * 1 * 16, test = 1 * 16; a model flag is listed, not planned
    assert plan["consumed_samples"] == {"train": 800, "valid": 48, "test": 16}
    # today's stack (megatron-core 0.19.2 installed) also notes that 0.16.1's rules were used, not 0.19.2's
    version_note = [
        n
        for n in plan["notes"]
        if n.startswith(
            "--framework-version 0.16.1: planned with Megatron-LM 0.16.1's flags and rules, not Megatron-LM 0.19.2's"
        )
    ]
    assert len(version_note) == (installed_mcore() == "0.19.2")
    assert [n for n in plan["notes"] if n not in version_note] == ["not affecting the plan: --num-layers"]
    assert plan["world_size"] == {"value": 4, "from": "--world-size"}


def test_megatron_exact_flags_and_defaults(demo_dir, capsys, monkeypatch):
    """A Megatron-LM command line in exact mode prints flags to paste; they are re-parsed and give the targets.
    Without --eval-iters Megatron-LM's own default (100) applies: (train_iters // 25 + 1) * 100 * 16 valid."""
    monkeypatch.chdir(demo_dir)
    base = [
        "plan",
        "--framework-version",
        "0.16.1",
        "--data-path",
        "1",
        "demo/data/web_text_document",
        "1",
        "demo/data/code_text_document",
        "--split",
        "100,0,0",
        "--seq-length",
        "512",
        "--global-batch-size",
        "16",
        "--micro-batch-size",
        "8",
        "--nproc-per-node",
        "2",
        "--train-samples",
        "1000",
        "--eval-interval",
        "25",
        "--lr",
        "3e-4",
    ]
    code, out, err = run_cli(
        base + ["--source-epochs", "web_text_document=1", "code_text_document=2", "--json"], capsys
    )
    assert code == 0, err
    plan = json.loads(out)
    flags = plan["settings"]["megatron_flags"]
    # the run was sample-based (--train-samples): it stays sample-based, as its LR flags would be
    assert flags.startswith(f"--train-samples {plan['train_iters'] * 16} --mid-level-dataset-surplus 0 --data-path ")
    train = [s for s in plan["sources"] if s["split"] == "train"]
    assert [s["samples_drawn"] for s in train] == [s["target_samples"] for s in train]
    code, out, err = run_cli(base + ["--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["train_iters"] == 1000 // 16
    assert json.loads(out)["consumed_samples"]["valid"] == (62 // 25 + 1) * 100 * 16


def test_megatron_unknown_flag_and_refusal(demo_dir, capsys, monkeypatch):
    """A flag Megatron-LM does not know: did-you-mean; one Megatron-LM refuses: its reason, one line."""
    monkeypatch.chdir(demo_dir)
    base = [
        "plan",
        "--framework-version",
        "0.16.1",
        "--data-path",
        "demo/data/web_text_document",
        "--split",
        "98,1,1",
        "--seq-length",
        "512",
        "--micro-batch-size",
        "4",
        "--eval-interval",
        "10",
        "--lr",
        "1e-4",
    ]
    code, _, err = run_cli(base + ["--train-iters", "5", "--micro-batch-sise", "4"], capsys)
    assert code == 2 and "--micro-batch-sise" in err and 'did you mean "--micro-batch-size"' in err
    code, _, err = run_cli(base + ["--train-iters", "5", "--rampup-batch-size", "4", "4", "100"], capsys)
    assert code == 2 and err.count("\n") == 1 and "rampup" in err


def _write(tmp_path, text):  # type: ignore[no-untyped-def]
    p = tmp_path / "bad.yml"
    p.write_text(text)
    return str(p)


BAD = [
    (
        '{"seq_length": 512, "train_batch_size": 16, "data_path": "%s", "train_iter": 5}',
        r'train_iter: unknown NeoX config key \(did you mean "train_iters"\?\)',
    ),
    (
        '{"seq_length": "512", "train_batch_size": 16, "data_path": "%s", "train_iters": 5}',
        r"seq_length: expected an integer, found str '512' \(write 512 without quotes\)",
    ),
    (
        '{"seq_length": 512, "train_batch_size": 16, "train_data_paths": ["%s"], "train_data_weights": [0], '
        '"valid_data_paths": [], "test_data_paths": [], "train_iters": 5}',
        r"train_data_weights: \[0\]; expected weights >= 0 with a sum > 0",
    ),
    (
        '{"seq_length": 512, "train_batch_size": 16, "train_data_paths": ["%s"], "train_data_weights": [1, 2], '
        '"valid_data_paths": [], "test_data_paths": [], "train_iters": 5}',
        "2 weights for 1 paths; give one weight per path",
    ),
    (
        '{"seq_length": 512, "train_batch_size": 16, "train_data_paths": ["%s"], "train_iters": 5}',
        r"train_data_paths: given without valid_data_paths and test_data_paths; NeoX stops",
    ),
    (
        '{"seq_length": 512, "train_micro_batch_size_per_gpu": 4, "global_num_gpus": 3, "pipe_parallel_size": 2, '
        '"data_path": "%s", "train_iters": 5}',
        r"dp = global_num_gpus / \(pipe_parallel_size \* model_parallel_size\) "
        r"= 3 / \(2 \* 1\) = 1.5 is not a whole number .*run on a multiple of 2 GPUs",
    ),
    (
        '{"seq_length": 512, "train_batch_size": 16, "data_path": "%s.nope", "train_iters": 5}',
        r"\.nope\.idx: file not found",
    ),
    (
        '{"seq_length": 512, "train_batch_size": 16, "data_path": "%s", "neox_epoch": {"epoch": 1}}',
        r'neox_epoch\.epoch: unknown key \(did you mean "epochs"\?\)',
    ),
    (
        '{"seq_length": 512, "train_batch_size": 16, "data_path": "%s", "split": "100,0,0", "train_iters": 5, '
        '"neox_epoch": {"epochs": -1}}',
        r"neox_epoch\.epochs: expected a value > 0, found -1",
    ),
]


@pytest.mark.parametrize("text,message", BAD)
def test_bad_config_one_line_exit_2(demo_dir, tmp_path, capsys, text, message):
    """Bad input: exit 2, one stderr line naming the file/key, value, expectation and fix; no traceback."""
    import re

    prefix = str(demo_dir / "demo" / "data" / "web_text_document")
    path = _write(tmp_path, text % prefix)
    code, out, err = run_cli(["plan", path], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.search(message, err), err


def test_empty_split_is_reported(fixed_corpus, capsys):
    """20 documents with split 98,1,1: megatron-core's valid split is empty and would loop forever."""
    p = fixed_corpus("small", [50] * 20)
    code, _, err = run_cli(
        [
            "plan",
            "--framework-version",
            "0.16.1",
            "--data-path",
            p,
            "--split",
            "98,1,1",
            "--seq-length",
            "8",
            "--global-batch-size",
            "2",
            "--micro-batch-size",
            "1",
            "--lr",
            "1e-4",
            "--eval-interval",
            "10",
            "--train-iters",
            "3",
        ],
        capsys,
    )
    assert code == 2 and "valid split of" in err and "has no documents" in err and "loop forever" in err


def test_bad_data_path_syntax(capsys):
    """Megatron-LM's get_blend_from_list reads an odd-length '1 a b' as three prefixes: '1' is not found."""
    code, _, err = run_cli(
        [
            "plan",
            "--framework-version",
            "0.16.1",
            "--data-path",
            "1",
            "a",
            "b",
            "--seq-length",
            "8",
            "--global-batch-size",
            "2",
            "--micro-batch-size",
            "1",
            "--lr",
            "1e-4",
            "--eval-interval",
            "10",
            "--train-iters",
            "3",
        ],
        capsys,
    )
    assert code == 2 and "1.idx: file not found" in err


def test_megatron_exact_settings(demo_dir, capsys, monkeypatch):
    """Megatron flags + --source-epochs: JSON carries weights, integer targets, surplus 0 and train_iters, and
    the replayed greedy draws equal the targets (web 1 pass, code 2 passes)."""
    monkeypatch.chdir(demo_dir)
    code, out, err = run_cli(
        [
            "plan",
            "--framework-version",
            "0.16.1",
            "--data-path",
            "1",
            "demo/data/web_text_document",
            "1",
            "demo/data/code_text_document",
            "--split",
            "100,0,0",
            "--seq-length",
            "512",
            "--global-batch-size",
            "16",
            "--micro-batch-size",
            "16",
            "--lr",
            "1e-4",
            "--eval-interval",
            "1000",
            "--eval-iters",
            "0",
            "--source-epochs",
            "web_text_document=1",
            "code_text_document=2",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    plan = json.loads(out)
    st = plan["settings"]
    assert st["mid_level_dataset_surplus"] == 0.0
    # web: (632167 - 1) // 512 = 1234; code: (2*383380 - 1) // 512 = 1497; 2731 = 170 * 16 + 11
    assert plan["train_iters"] == 170 and plan["remainder"]["samples"] == 11
    train = [s for s in plan["sources"] if s["split"] == "train"]
    assert [s["samples_drawn"] for s in train] == list(st["targets"].values())
    assert sum(st["targets"].values()) == 170 * 16


def test_duplicate_key_across_files_like_neox(demo_dir, tmp_path, capsys):
    """NeoX's from_ymls rejects a key set in two files; so does the planner, naming both files."""
    prefix = str(demo_dir / "demo" / "data" / "web_text_document")
    (tmp_path / "a.yml").write_text(json.dumps({"seq_length": 512, "train_batch_size": 16, "data_path": prefix}))
    (tmp_path / "b.yml").write_text('{"seq_length": 256, "train_iters": 10}')
    code, _, err = run_cli(["plan", str(tmp_path / "a.yml"), str(tmp_path / "b.yml")], capsys)
    assert code == 2 and "seq_length: already set in" in err and "a.yml" in err and "b.yml" in err


def test_write_config_replaces_an_input_train_iters_with_the_dash_spelling(demo_dir, tmp_path, capsys):
    """train_iters set in the input: the overlay writes train-iters, which NeoX lets a later file use to replace
    it (it refused before, as on every real Pythia config)."""
    import yaml

    prefix = str(demo_dir / "demo" / "data" / "web_text_document")
    (tmp_path / "a.yml").write_text(
        json.dumps({"seq_length": 512, "train_batch_size": 16, "data_path": prefix, "train_iters": 10})
    )
    code, _, err = run_cli(
        ["plan", str(tmp_path / "a.yml"), "--epochs", "1", "--write-config", str(tmp_path / "o.yml")], capsys
    )
    assert code == 0, err
    written = yaml.safe_load((tmp_path / "o.yml").read_text())
    assert "train-iters" in written and "train_iters" not in written


def test_overlay_plans_again(demo_dir, tmp_path, capsys, monkeypatch):
    """The overlay --write-config writes is itself a valid input: planning config + overlay gives the same run."""
    monkeypatch.chdir(demo_dir)
    overlay_path = tmp_path / "overlay.yml"
    assert run_cli(["plan", "configs/blend_per_source_epochs.yml", "--write-config", str(overlay_path)], capsys)[0] == 0
    import yaml

    base = yaml.safe_load((demo_dir / "configs" / "blend_per_source_epochs.yml").read_text())
    del base["neox_epoch"]
    (tmp_path / "base.yml").write_text(json.dumps(base))
    code, out, err = run_cli(["plan", str(tmp_path / "base.yml"), str(overlay_path), "--json"], capsys)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["train_iters"] == 187
    assert [s["samples_drawn"] for s in plan["sources"] if s["split"] == "train"] == [1233, 1496, 263]


def test_plan_never_imports_torch(demo_dir):
    """The planning core answers without torch, megatron-core or deepspeed (a second on a laptop)."""
    import subprocess
    import sys

    code = (
        "import sys; from neox_epoch.cli import main; rc = main(['plan', 'configs/one_source_one_epoch.yml', "
        "'--json']); heavy = [m for m in ('torch', 'megatron', 'deepspeed') if m in sys.modules]; "
        "print('HEAVY', heavy); sys.exit(rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=demo_dir, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout


def test_megatron_version_from_checkout_on_path(demo_dir, capsys, monkeypatch, tmp_path):
    """A Megatron-LM checkout first on sys.path decides the version (it shadows the wheel), read from its
    package_info.py as text; an unverified version is refused unless --force-version."""
    pkg = tmp_path / "Megatron-LM" / "megatron" / "core"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('never imported by the planner')\n")
    (pkg / "package_info.py").write_text('MAJOR = 0\nMINOR = 99\nPATCH = 0\nPRE_RELEASE = ""\n')
    monkeypatch.syspath_prepend(str(tmp_path / "Megatron-LM"))
    monkeypatch.chdir(demo_dir)
    flags = [
        "plan",
        "--data-path",
        "demo/data/web_text_document",
        "--seq-length",
        "512",
        "--global-batch-size",
        "16",
        "--micro-batch-size",
        "4",
        "--lr",
        "1e-4",
        "--eval-interval",
        "10",
        "--train-iters",
        "20",
        "--json",
    ]
    code, _, err = run_cli(flags, capsys)
    assert code == 2 and "megatron-core 0.99.0 (from" in err and "--force-version" in err
    assert "(verified: 0.10.0, 0.16.1, 0.19.2)" in err
    code, out, _ = run_cli(flags + ["--force-version"], capsys)
    assert code == 0 and json.loads(out)["framework_version"] == "0.99.0"
    (pkg / "package_info.py").write_text('MAJOR = 0\nMINOR = 16\nPATCH = 1\nPRE_RELEASE = ""\n')
    code, out, _ = run_cli(flags, capsys)
    assert code == 0 and json.loads(out)["framework_version"] == "0.16.1"


def test_enforce_and_separate_epochs_in_plan(demo_dir, capsys, monkeypatch, tmp_path):
    """1.5 passes over one source: NeoX builds 2 epochs; jointly shuffled, enforce would stop the run (exit 1);
    with separate_epochs the second pass is its own block, nothing is left unseen, exit 0."""
    monkeypatch.chdir(demo_dir)
    text = open("configs/one_source_one_epoch.yml", encoding="utf-8").read()
    joint = tmp_path / "joint.yml"
    joint.write_text(
        text.replace(
            '"neox_epoch": {"epochs": 1, "blend_buffer": 1.0}', '"neox_epoch": {"epochs": 1.5, "enforce": true}'
        )
    )
    code, out, err = run_cli(["plan", str(joint), "--json"], capsys)
    plan = json.loads(out)
    assert code == 1 and "enforce: the run would stop" in err and "cross-epoch spillover" in err
    assert len(plan["enforce_findings"]) == 1
    sep = tmp_path / "sep.yml"
    sep.write_text(
        text.replace(
            '"neox_epoch": {"epochs": 1, "blend_buffer": 1.0}',
            '"neox_epoch": {"epochs": 1.5, "enforce": true, "separate_epochs": true}',
        )
    )
    code, out, err = run_cli(["plan", str(sep)], capsys)
    assert code == 0, err
    assert "separate_epochs: each epoch shuffled on its own" in out and "2 (sep.)" in out
    code, out, _ = run_cli(["plan", str(sep), "--json"], capsys)
    (train,) = [s for s in json.loads(out)["sources"] if s["split"] == "train"]
    assert (train["epochs_built"], train["tokens_unseen"], train["tokens_unseen_exact"]) == (2, 0, True)


def test_internal_error_is_one_line_exit_3(capsys, monkeypatch):
    """An unexpected exception (a bug) is one line with the command and input, exit 3; --debug re-raises."""
    import neox_epoch.plan.cli as plan_cli

    def boom(args):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr(plan_cli, "build_input", boom)
    code, _, err = run_cli(["plan", "x.yml"], capsys)
    assert code == 3 and err.count("\n") == 1
    assert "neox-epoch plan: internal error: ZeroDivisionError: simulated bug (input: x.yml)" in err
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "plan", "x.yml"])


def test_deepy_conf_dir_and_bare_names(demo_dir, capsys, monkeypatch):
    """deepy.py's `-d configs one_source_one_epoch` reads configs/one_source_one_epoch.yml: the same plan."""
    monkeypatch.chdir(demo_dir)
    code, out, err = run_cli(["plan", "-d", "configs", "one_source_one_epoch", "--json"], capsys)
    assert code == 0, err
    code2, out2, _ = run_cli(["plan", "configs/one_source_one_epoch.yml", "--json"], capsys)
    assert code2 == 0 and json.loads(out)["train_iters"] == json.loads(out2)["train_iters"] == 77


def test_demo_plans_everything_on_the_core_install(tmp_path):  # type: ignore[no-untyped-def]
    """README command one's job (`neox-epoch demo`) exits 0 and imports neither torch, deepspeed nor megatron-core
    (it runs on the core install: numpy, pyyaml, the package); its Megatron-LM line names the megatron-core
    version it mirrors, so it plans without one installed: web 1207 + code 732 = 1939 targets // 16 = 121."""
    import subprocess
    import sys

    shutil.copytree(os.path.join(ROOT, "configs"), tmp_path / "configs")
    code = (
        "import sys; from neox_epoch.cli import main; rc = main(['demo']); "
        "print('HEAVY', sorted(m for m in ('torch', 'deepspeed', 'megatron') if m in sys.modules)); sys.exit(rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "HEAVY []" in r.stdout
    assert r.stdout.count("$ neox-epoch plan ") == len(CONFIGS) + 1
    mirrored = installed_mcore() or VERIFIED_MCORE_VERSIONS[-1]  # 0.16.1 on NeoX's stack, 0.19.2 on today's
    assert f"neox-epoch plan (megatron-core {mirrored} semantics)" in r.stdout
    assert "train_iters 121 -> 1,936 train samples" in r.stdout


def test_megatron_empty_data_cache_path_is_a_note(demo_dir, tmp_path, capsys, monkeypatch):
    """An empty --data-cache-path is a new cache (Megatron-LM builds the indexes there on the first launch): a
    note saying so, not the audit's "cache-unreadable" warning it was."""
    monkeypatch.chdir(demo_dir)
    cache = tmp_path / "cache"
    cache.mkdir()
    code, out, err = run_cli(
        [
            "plan",
            "--framework-version",
            "0.16.1",
            "--data-path",
            "demo/data/web_text_document",
            "--split",
            "98,1,1",
            "--seq-length",
            "512",
            "--global-batch-size",
            "16",
            "--micro-batch-size",
            "4",
            "--world-size",
            "4",
            "--lr",
            "3e-4",
            "--train-iters",
            "50",
            "--eval-iters",
            "1",
            "--eval-interval",
            "25",
            "--data-cache-path",
            str(cache),
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    plan = json.loads(out)
    assert not [w for w in plan["warnings"] if "cache" in json.dumps(w)], plan["warnings"]
    assert (
        f"--data-cache-path {cache}: empty; Megatron-LM builds this run's index caches there on its first "
        "launch (nothing to check yet)" in plan["notes"]
    )
