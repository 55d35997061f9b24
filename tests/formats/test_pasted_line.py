"""A pasted command line, wherever its options stand: before the launcher, among torchrun's flags, after the
script. The plan examples of docs/plan.md run as printed. Other frameworks' command lines are refused once. Every
command's --help has a description and examples; bare ``neox-epoch`` and bad plan input get one error line."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from typing import Any

import optional
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neox_epoch.cli import COMMANDS, main
from neox_epoch.demo import write_demo_corpus
from neox_epoch.errors import ConfigError
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.detect import VERIFIED_MCORE_VERSIONS, megatron_core_version
from neox_epoch.formats.megatron_args import parse_megatron_argv
from neox_epoch.semantics.megatron_lm import MegatronRefusal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MCORE = megatron_core_version()
#: a small valid Megatron-LM command line: micro 2, global batch 256
FLAGS = (
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --lr 1e-4 --seq-length 128 --micro-batch-size 2 "
    "--global-batch-size 256 --data-path data/web --split 98,1,1 --eval-interval 10 --train-iters 100"
).split()


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- where the world flags stand


def test_world_size_before_the_script_counts() -> None:
    """--world-size before pretrain_gpt.py used to be dropped (world 1, exit 0); it counts as after the script:
    256 is not a multiple of micro 2 x dp 3, refused as Megatron-LM refuses it."""
    with pytest.raises(
        MegatronRefusal,
        match=r"not divisible by micro batch size \(2\) times data parallel size "
        r"\(3\)",
    ):
        parse_megatron_argv(["--world-size", "3", "pretrain_gpt.py", *FLAGS])
    a = parse_megatron_argv(["--world-size", "4", "pretrain_gpt.py", *FLAGS])
    assert (a.world_size, a.world_size_source, a.data_parallel_size) == (4, "--world-size", 4)
    b = parse_megatron_argv(["torchrun", "--nproc_per_node", "2", "--world-size", "16", "pretrain_gpt.py", *FLAGS])
    assert (b.world_size, b.data_parallel_size) == (16, 16)  # between torchrun's flags: neox-epoch's, counts


def test_world_size_wins_over_torchrun_and_says_so() -> None:
    """An explicit --world-size is the whole job's GPUs; torchrun's nproc x nnodes (8 here) is one launch."""
    a = parse_megatron_argv(["--world-size", "64", "torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", *FLAGS])
    assert (a.world_size, a.data_parallel_size) == (64, 64)
    assert a.world_size_source == (
        "--world-size; it wins over the 8 processes the pasted launcher starts, "
        "--nproc-per-node 8 x --nnodes 1: --world-size is read as the whole job's GPUs, "
        "the pasted line as one launch of it, one node's"
    )
    same = parse_megatron_argv(
        ["torchrun", "--nproc_per_node", "8", "--nnodes=2", "pretrain_gpt.py", *FLAGS, "--world-size", "16"]
    )
    assert same.world_size_source == "--world-size, equal to the launcher's --nproc-per-node 8 x --nnodes 2"
    elastic = parse_megatron_argv(["--world-size", "8", "torchrun", "--nnodes", "1:4", "pretrain_gpt.py", *FLAGS])
    assert (
        elastic.world_size_source
        == "--world-size; the launcher's --nproc-per-node 1 x --nnodes 1:4 is not a fixed world"
    )


def test_world_size_note_is_printed(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan's world line names the winner and why (it used to say 8 and nothing else)."""
    monkeypatch.chdir(tmp_path)
    os.makedirs("data")
    write_random_corpus("data/web", 1, 4000, 1, 300)
    line = [
        "plan",
        "--framework-version",
        "0.16.1",
        "--world-size",
        "64",
        "torchrun",
        "--nproc_per_node",
        "8",
        "pretrain_gpt.py",
        *FLAGS[:-1],
        "512",
    ]
    code, out, err = run_cli(line, capsys)
    assert code == 0, err
    assert (
        "\nworld: 64 (--world-size; it wins over the 8 processes the pasted launcher starts, --nproc-per-node 8 x "
        "--nnodes 1: --world-size is read as the whole job's GPUs, the pasted line as one launch of it, one "
        "node's); data-parallel size 64; Megatron-LM 0.16.1 flags\n"
    ) in out
    code, out, err = run_cli(
        ["plan", "--framework-version", "0.16.1", "--world-size", "3", "pretrain_gpt.py", *FLAGS], capsys
    )
    assert code == 2 and err.count("\n") == 1 and "times data parallel size (3)" in err


def test_torchrun_flags_as_torchrun_reads_them() -> None:
    """torchrun's underscore and dash spellings, ``=value`` and unique prefixes (``--nnode``) all count; a pasted
    environment assignment before the launcher is skipped."""
    a = parse_megatron_argv(
        [
            "NCCL_DEBUG=INFO",
            "torchrun",
            "--nnode",
            "2",
            "--nproc-per-node=4",
            "--master_port",
            "6000",
            "pretrain_gpt.py",
            *FLAGS,
        ]
    )
    assert (a.world_size, a.world_size_source) == (8, "--nproc-per-node 4 x --nnodes 2")
    b = parse_megatron_argv(
        ["python", "-m", "torch.distributed.run", "--nproc_per_node", "4", "pretrain_gpt.py", *FLAGS]
    )
    assert b.world_size == 4
    c = parse_megatron_argv(["python", "pretrain_gpt.py", *FLAGS])
    assert (c.world_size, c.world_size_source) == (1, "default 1 (python starts one process; give --world-size N)")


def test_megatron_flags_before_the_launcher_count_once() -> None:
    """A Megatron-LM flag before the launcher counts; given again after the script with another value it is
    refused (which one was meant?); given to torchrun itself it is refused (torchrun rejects it)."""
    gbs = [t for t in FLAGS if t not in ("--global-batch-size", "256")]
    a = parse_megatron_argv(
        ["--global-batch-size", "512", "torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", *gbs]
    )
    assert (a.global_batch_size, a.world_size) == (512, 8)
    no_data = [t for t in FLAGS if t not in ("--data-path", "data/web")]
    b = parse_megatron_argv(
        [
            "--data-path",
            "0.3",
            "data/web",
            "0.7",
            "data/code",
            "torchrun",
            "--nproc_per_node",
            "2",
            "pretrain_gpt.py",
            *no_data,
        ]
    )  # nargs "*": its values end at the launcher
    assert (b.blend, b.world_size) == ((("data/web", "data/code"), (0.3, 0.7)), 2)
    with pytest.raises(ConfigError) as info:
        parse_megatron_argv(
            ["--global-batch-size", "512", "torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", *FLAGS]
        )
    assert str(info.value) == (
        "--global-batch-size: 512 before pretrain_gpt.py and 256 after it; give it once "
        "(neox-epoch counts options before, between and after the script alike)"
    )
    with pytest.raises(ConfigError) as info:
        parse_megatron_argv(["torchrun", "--nproc_per_node", "8", "--micro-batch-size", "4", "pretrain_gpt.py", *FLAGS])
    assert str(info.value) == (
        "--micro-batch-size: given to torchrun before pretrain_gpt.py, where the launcher reads "
        "it (and rejects it: it is a Megatron-LM flag); move it after pretrain_gpt.py"
    )
    with pytest.raises(ConfigError, match=r"^--nproc-per-node: 4 after the script and 8 in the launcher's flags; "):
        parse_megatron_argv(["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", *FLAGS, "--nproc-per-node", "4"])


def test_a_launcher_not_read_needs_world_size() -> None:
    """srun/deepspeed start a world neox-epoch cannot see: refused unless --world-size says it."""
    with pytest.raises(ConfigError) as info:
        parse_megatron_argv(["srun", "-N", "2", "python", "pretrain_gpt.py", *FLAGS])
    assert str(info.value) == (
        "srun: a launcher whose world neox-epoch does not read (it reads torchrun's "
        "--nproc-per-node x --nnodes); give --world-size N, the GPUs the run uses"
    )
    assert (
        parse_megatron_argv(["srun", "-N", "2", "python", "pretrain_gpt.py", *FLAGS, "--world-size", "16"]).world_size
        == 16
    )


# ----------------------------------------------------------------------------------------- --source-epochs


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> str:
    """data/web and data/code (docs/plan.md's prefixes), the demo corpus and configs/, in one directory."""
    d = tmp_path_factory.mktemp("readme")
    os.makedirs(d / "data")
    write_random_corpus(str(d / "data" / "web"), 1, 7500, 1, 800)
    write_random_corpus(str(d / "data" / "code"), 2, 2500, 1, 800)
    write_demo_corpus(str(d / "demo" / "data"))
    shutil.copytree(os.path.join(ROOT, "configs"), d / "configs")
    return str(d)


def test_source_epochs_end_at_the_launcher(
    corpora: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--source-epochs web=1 code=2 torchrun ...: the values end at torchrun (it used to be read as a value and
    refused: "'torchrun': expected NAME=E"); before a NeoX config file the file stays a config."""
    monkeypatch.chdir(corpora)
    code, out, err = run_cli(
        [
            "plan",
            "--framework-version",
            "0.16.1",
            "--source-epochs",
            "web=1",
            "code=2",
            "torchrun",
            "--nproc_per_node",
            "8",
            "pretrain_gpt.py",
            *FLAGS[:14],
            "--data-path",
            "1",
            "data/web",
            "1",
            "data/code",
            "--split",
            "98,1,1",
            "--eval-interval",
            "10",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    train = [s for s in json.loads(out)["sources"] if s["split"] == "train"]
    assert [s["samples_drawn"] for s in train] == [s["target_samples"] for s in train]
    code, out, err = run_cli(
        ["plan", "--source-epochs", "web_text_document=1", "configs/one_source_one_epoch.yml", "--json"], capsys
    )
    assert code == 0, err
    assert json.loads(out)["train_iters"] == 77


# ---------------------------------------------------------------- the plan examples (docs/plan.md), run as printed


def readme_plan_commands() -> list[str]:
    """Every command of the ``neox-epoch plan`` example block (docs/plan.md, moved there from the README),
    continuation lines joined."""
    with open(os.path.join(ROOT, "docs", "plan.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Examples") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    joined = block.group(1).replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("neox-epoch")]


def runnable(command: str, cwd: str) -> bool:
    """False for the examples' placeholders: ``...``, or a config file that is the reader's own."""
    argv = shlex.split(command, comments=True)
    if "..." in argv or "-d" in argv:
        return False
    return all(os.path.exists(os.path.join(cwd, t)) for t in argv if t.endswith((".yml", ".yaml")))


@optional.needs("megatron.core")  # the Megatron-LM example mirrors the installed megatron-core, as for its user
@pytest.mark.skipif(
    MCORE is not None and MCORE not in VERIFIED_MCORE_VERSIONS,
    reason=f"the installed megatron-core {MCORE} is not verified here: plan refuses the docs' "
    "Megatron-LM example without --force-version, as it would for its user",
)
def test_readme_plan_examples_run_as_printed(
    corpora: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/plan.md's plan examples that name real files run as printed (its Megatron-LM example used to exit 2 on
    --source-epochs), with the numbers of these corpora: web 1 pass = 1424 samples, code 2 passes = 960, one
    global batch of 512 -> 2384 // 512 = 4 iterations drawing web 1223, code 825 (the 336-sample remainder off
    both); the demo config: 77 iterations of 16."""
    monkeypatch.chdir(corpora)
    commands = readme_plan_commands()
    ran = [c for c in commands if runnable(c, corpora)]
    assert len(commands) == 7 and len(ran) == 2, commands
    results = {}
    for command in ran:
        code, out, err = run_cli(shlex.split(command, comments=True)[1:], capsys)
        assert code == 0, (command, err)
        results["megatron" if "pretrain_gpt.py" in command else "neox"] = out
    mlm = results["megatron"]
    assert "seq_length 2048, global batch 512, train_iters 4 -> 2,048 train samples" in mlm
    assert "\nworld: 32 (--nproc-per-node 8 x --nnodes 4); data-parallel size 32;" in mlm
    assert mlm.endswith("  --train-iters 4 --mid-level-dataset-surplus 0 --data-path 1223.0 data/web 825.0 data/code\n")
    assert "train_iters 77 -> 1,232 train samples" in results["neox"]


# ------------------------------------------------------------------------------------ other frameworks


#: Megatron-DeepSpeed's examples_deepspeed/pretrain_llama2_distributed.sh, as the shell expands it (shortened)
MDS_LLAMA2 = (
    "torchrun --nproc_per_node 8 --nnodes 1 --node_rank 0 --master_addr localhost --master_port 6000 "
    "pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers 24 "
    "--hidden-size 2048 --ffn-hidden-size 5504 --num-attention-heads 16 --micro-batch-size 4 "
    "--global-batch-size 32 --seq-length 2048 --max-position-embeddings 2048 --train-iters 250000 "
    "--data-path 1 data/web --data-impl mmap --tokenizer-type GPTSentencePieceTokenizer "
    "--tokenizer-model tok.model --split 949,50,1 --lr 3e-4 --lr-decay-style cosine --min-lr 3e-5 "
    "--lr-warmup-iters 2000 --log-interval 1 --save-interval 10000 --eval-interval 1000 --eval-iters 10 "
    "--bf16 --no-query-key-layer-scaling --swiglu --normalization rmsnorm --num-key-value-heads 4 "
    "--zero-stage=0 --deepspeed_config=ds.json --deepspeed"
)
#: its examples_deepspeed/MoE/ds_pretrain_gpt_350M_dense.sh (deepspeed launcher, token-based schedule)
MDS_GPT = (
    "deepspeed pretrain_gpt.py --override-opt_param-scheduler --tensor-model-parallel-size 1 "
    "--init-method-std 0.014 --lr-decay-tokens 260000000000 --lr-warmup-tokens 375000000 --micro-batch-size 4 "
    "--global-batch-size 256 --num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
    "--train-tokens 300000000000 --train-samples 439453125 --lr 3e-4 --split 98,2,0 --data-path data/web "
    "--data-impl mmap --fp16 --deepspeed --deepspeed_config ds_config.json --checkpoint-activations "
    "--deepspeed-activation-checkpointing"
)
#: NeMo's megatron_gpt_pretraining.py with Hydra overrides, launched by torchrun
NEMO = (
    "torchrun --nnodes 1 --nproc_per_node 8 megatron_gpt_pretraining.py trainer.devices=8 trainer.max_steps=1000 "
    "model.data.data_prefix=[1,data/web] model.micro_batch_size=4 model.global_batch_size=64 "
    "model.tensor_model_parallel_size=1"
)
SUPPORTED = (
    "not supported by neox-epoch; it plans GPT-NeoX configs (neox-epoch plan CONFIG.yml ...) and "
    "Megatron-LM 0.16.1's pretrain_gpt.py flags (torchrun ... pretrain_gpt.py --data-path ...)"
)


@pytest.mark.parametrize(
    "line, looks_like",
    [
        (MDS_LLAMA2, "Megatron-DeepSpeed (--num-key-value-heads, --zero-stage, --deepspeed_config, --deepspeed)"),
        (MDS_GPT, "Megatron-DeepSpeed (--lr-decay-tokens, --lr-warmup-tokens, --train-tokens, --deepspeed)"),
        (
            NEMO,
            "NeMo (a Hydra-configured NeMo training script) (megatron_gpt_pretraining.py, trainer.devices=8, "
            "trainer.max_steps=1000)",
        ),
        (
            "python pretrain_gpt.py --data-path data/web --data-impl mmap --checkpoint-activations --DDP-impl local "
            "--micro-batch-size 2",
            "an older Megatron-LM or Megatron-DeepSpeed (flags Megatron-LM removed) (--data-impl, "
            "--checkpoint-activations, --DDP-impl)",
        ),
    ],
)
def test_other_frameworks_refused_once(line: str, looks_like: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Another framework's command line: one line naming it and what is supported (each used to be refused one
    unknown flag per rerun: 4 to 7 reruns for these lines)."""
    code, out, err = run_cli(["plan", "--framework-version", "0.16.1", *line.split()], capsys)
    assert (code, out) == (2, "")
    assert err == f"neox-epoch plan: error: this command line looks like {looks_like}: {SUPPORTED}\n"


def test_one_fork_flag_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    """One Megatron-DeepSpeed flag in a Megatron-LM line: the unknown-flag refusal says whose flag it is."""
    code, _, err = run_cli(["plan", "--framework-version", "0.16.1", "pretrain_gpt.py", *FLAGS, "--deepspeed"], capsys)
    assert code == 2
    assert err.startswith(
        "neox-epoch plan: error: --deepspeed: not a Megatron-LM 0.16.1 flag (a Megatron-DeepSpeed "
        "flag): Megatron-LM's parse_args exits on it"
    )


def test_a_neox_launch_line_names_its_configs(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["plan", "deepy.py", "train.py", "configs/125M.yml", "configs/local_setup.yml"], capsys)
    assert code == 2
    assert err == (
        "neox-epoch plan: error: this command line looks like a GPT-NeoX launch (deepy.py train.py "
        "CONFIG.yml ...) (deepy.py): give neox-epoch plan the config files themselves: neox-epoch plan "
        "configs/125M.yml configs/local_setup.yml\n"
    )


# ------------------------------------------------------------------------------------------------ messages


def test_bare_command_is_short_usage_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """Bare ``neox-epoch``: usage, the commands and an error line on stderr, exit 2 (it printed the whole help to
    stdout, no error line)."""
    code, out, err = run_cli([], capsys)
    lines = err.splitlines()
    assert (code, out) == (2, "")
    assert lines[0] == "usage: neox-epoch [-h] [--version] [-v] [--debug] COMMAND ..."
    assert lines[1] == "commands:" and [line.split()[0] for line in lines[2:-1]] == list(COMMANDS)
    assert lines[-1] == (
        "neox-epoch: error: no command given; choose one (neox-epoch COMMAND --help shows its options and examples)"
    )


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_help_has_a_description_and_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``neox-epoch COMMAND --help``: usage, a description paragraph, and examples of that command (demo and
    resume-check had no description, none had examples)."""
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    paragraphs = out.split("\n\n")
    assert paragraphs[0].startswith(f"usage: neox-epoch {command} ")
    assert len(paragraphs[1].split()) >= 15 and not paragraphs[1].startswith(("positional", "options"))
    examples = out[out.index("\nexamples:\n") :].splitlines()[2:]
    assert examples and all(
        line.startswith(f"  neox-epoch {command}") or line.startswith("      ") for line in examples
    )


def test_plan_help_shows_both_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "GPT-NeoX YAML config files" in out and "a Megatron-LM pretrain_gpt.py command line pasted whole" in out
    assert "neox-epoch plan configs/125M.yml configs/local_setup.yml # NeoX configs" in out
    assert "neox-epoch plan --source-epochs web=1 code=2 torchrun --nproc-per-node 8 pretrain_gpt.py" in out


def test_plan_of_a_directory(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plan DIR`` said "DIR.yml: NeoX YAML config file not found"; it says it is a directory and what to give."""
    monkeypatch.chdir(tmp_path)
    os.makedirs("cfg")
    code, _, err = run_cli(["plan", "cfg"], capsys)
    assert code == 2
    assert err == (
        "neox-epoch plan: error: cfg: a directory, not a NeoX config file; it holds no .yml/.yaml files: "
        "give the NeoX config files themselves (or -d cfg NAME ..., as deepy.py's -d)\n"
    )
    for name in ("b.yml", "a.yml"):
        (tmp_path / "cfg" / name).write_text("{}")
    code, _, err = run_cli(["plan", "cfg"], capsys)
    assert err == (
        "neox-epoch plan: error: cfg: a directory, not a NeoX config file; it holds 2 YAML file(s) "
        "(cfg/a.yml cfg/b.yml): give the ones the run uses, e.g. neox-epoch plan cfg/a.yml (or -d cfg "
        "NAME ..., as deepy.py's -d)\n"
    )


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_epochs_zero_names_epochs(
    value: str, corpora: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--epochs 0 was reported as "--source-epochs: web_text_document=0.0"; it names --epochs, the value, the fix
    (NeoX configs and Megatron-LM lines alike)."""
    monkeypatch.chdir(corpora)
    want = (
        f"neox-epoch plan: error: --epochs {float(value):g}: expected the passes over every train source, a "
        "number > 0 (fractional allowed); give e.g. --epochs 1, or --source-epochs NAME=E ... per source\n"
    )
    code, _, err = run_cli(["plan", "configs/one_source_one_epoch.yml", "--epochs", value], capsys)
    assert (code, err) == (2, want)
    code, _, err = run_cli(
        ["plan", "--framework-version", "0.16.1", "--epochs", value, "pretrain_gpt.py", *FLAGS], capsys
    )
    assert (code, err) == (2, want)


# ------------------------------------------------------------------------------------------ as a property


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    world=st.sampled_from([1, 2, 4, 8, 16]),
    nproc=st.sampled_from([None, 2, 8]),
    where=st.sampled_from(["before", "among", "after", "before-script"]),
    equals=st.booleans(),
)
def test_world_size_counts_wherever_it_stands(world: int, nproc: int | None, where: str, equals: bool) -> None:
    """--world-size W before torchrun, among its flags, after the script, or before a bare script: the world is W,
    and the data-parallel size W, wherever it stands; the source names torchrun's world when there is one."""
    flags = [t for t in FLAGS if t not in ("--global-batch-size", "256")] + ["--global-batch-size", "512"]
    ws = ["--world-size" if not equals else "--world-size=" + str(world)] + ([] if equals else [str(world)])
    launcher = ["torchrun"] + (["--nproc_per_node", str(nproc)] if nproc else [])
    if where == "before":
        argv = [*ws, *launcher, "pretrain_gpt.py", *flags]
    elif where == "among":
        argv = [launcher[0], *ws, *launcher[1:], "pretrain_gpt.py", *flags]
    elif where == "after":
        argv = [*launcher, "pretrain_gpt.py", *flags, *ws]
    else:
        argv, nproc = [*ws, "pretrain_gpt.py", *flags], None
    a = parse_megatron_argv(argv)
    assert (a.world_size, a.data_parallel_size) == (world, world)
    if nproc is None:
        assert a.world_size_source == "--world-size"
    elif nproc == world:
        assert a.world_size_source == f"--world-size, equal to the launcher's --nproc-per-node {nproc} x --nnodes 1"
    else:
        assert a.world_size_source.startswith(f"--world-size; it wins over the {nproc} processes the pasted launcher")
