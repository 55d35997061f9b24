"""Property: no input makes ``plan``, ``check-batch`` or ``audit`` print a traceback or exit outside the
documented codes (0 ok, 1 findings, 2 bad input; 3 = internal error is itself a failure here).

Hypothesis draws command-line values (negative, zero, huge, non-finite, not numbers), NeoX YAML configs
(known keys with wrong types, unknown keys, '-' and '_' spellings, non-UTF-8 bytes) and .idx files
(valid, truncated, garbage, wrong dtype codes) and runs the real CLI in-process.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neox_epoch.cli import main
from neox_epoch.formats.corpus import write_corpus

DOCUMENTED = {0, 1, 2}
SETTINGS = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not os.environ.get("FUZZ_EXAMPLES"),
)

numbers = st.one_of(
    st.integers(-3, 3),
    st.integers(-(10**12), 10**12),
    st.sampled_from(["inf", "-inf", "nan", "1e400", "0.5", "x", ""]),
)
text_numbers = numbers.map(str)


@pytest.fixture(scope="module")
def data_dir():
    d = tempfile.mkdtemp(prefix="fuzz-data-")
    rng = np.random.RandomState(0)
    write_corpus(os.path.join(d, "good"), [rng.randint(0, 500, size=n) for n in rng.randint(1, 300, size=200)])
    write_corpus(os.path.join(d, "tiny"), [np.arange(3)])
    with open(os.path.join(d, "good.idx"), "rb") as f:
        head = f.read()
    for name, blob in (
        ("trunc", head[:30]),
        ("garbage", b"not an index at all" * 3),
        ("dtype", head[:17] + b"\x63" + head[18:]),
        ("empty", b""),
    ):
        with open(os.path.join(d, name + ".idx"), "wb") as f:
            f.write(blob)
        shutil.copy(os.path.join(d, "good.bin"), os.path.join(d, name + ".bin"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as err:  # argparse's own usage errors exit 2
        rc = int(err.code) if isinstance(err.code, int) else 2
    err = capsys.readouterr().err
    return rc, err


def _assert_clean(rc: int, err: str, argv: list[str]) -> None:
    assert "Traceback" not in err, (argv, err)
    assert rc in DOCUMENTED, (argv, rc, err)
    if rc == 2 and "usage:" not in err:
        assert len(err.strip().splitlines()) == 1, (argv, err)  # one line naming the problem


@SETTINGS
@given(
    prefix=st.sampled_from(["good", "tiny", "trunc", "garbage", "dtype", "empty", "missing"]),
    weight=st.one_of(st.none(), text_numbers),
    flags=st.dictionaries(
        st.sampled_from(
            [
                "--seq-length",
                "--global-batch-size",
                "--train-iters",
                "--train-samples",
                "--eval-interval",
                "--eval-iters",
                "--seed",
                "--mid-level-dataset-surplus",
                "--epochs",
                "--split",
                "--micro-batch-size",
                "--world-size",
                "--rampup-batch-size",
                "--tensor-model-parallel-size",
                "--lr-warmup-fraction",
                "--lr-decay-iters",
                "--nproc-per-node",
                "--unknown-flag",
            ]
        ),
        text_numbers,
        max_size=6,
    ),
)
def test_plan_flags_never_traceback(data_dir, capsys, prefix, weight, flags):
    path = os.path.join(data_dir, prefix)
    argv = ["plan", "--framework-version", "0.16.1", "--data-path"] + ([weight] if weight is not None else []) + [path]
    for flag, value in (("--micro-batch-size", "1"), ("--lr", "1e-4"), ("--eval-interval", "10")):
        flags.setdefault(flag, value)  # Megatron-LM refuses a command line without them
    flags.setdefault("--seq-length", "64")
    flags.setdefault("--global-batch-size", "4")
    if "--epochs" not in flags:
        flags.setdefault("--train-iters", "10")
    for k, v in flags.items():
        argv += [k, v] if v else [k]
    rc, err = _run(argv, capsys)
    _assert_clean(rc, err, argv)


yaml_values = st.one_of(
    numbers,
    st.booleans(),
    st.none(),
    st.lists(st.integers(-2, 5), max_size=3),
    st.text(max_size=8),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
neox_keys = st.sampled_from(
    [
        "seq_length",
        "seq-length",
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "train_iters",
        "train-iters",
        "eval_interval",
        "eval_iters",
        "split",
        "data_path",
        "train_data_paths",
        "train_data_weights",
        "weight_by_num_documents",
        "train_epochs",
        "warmup",
        "lr_decay_iters",
        "global_num_gpus",
        "num_gpus",
        "pipe_parallel_size",
        "model_parallel_size",
        "seed",
        "neox_epoch",
        "not_a_key",
        "gas",
    ]
)


@SETTINGS
@given(
    config=st.dictionaries(neox_keys, yaml_values, max_size=8),
    raw=st.binary(max_size=40),
    use_raw=st.booleans(),
    command=st.sampled_from(["plan", "check-batch"]),
)
def test_neox_configs_never_traceback(data_dir, tmp_path_factory, capsys, config, raw, use_raw, command):
    import yaml

    d = tmp_path_factory.mktemp("cfg")
    path = os.path.join(d, "c.yml")
    base = {
        "seq_length": 64,
        "train_batch_size": 4,
        "train_iters": 10,
        "data_path": os.path.join(data_dir, "good"),
        "global_num_gpus": 1,
    }
    base.update(config)
    with open(path, "wb") as f:
        f.write(raw if use_raw else yaml.safe_dump(base).encode())
    argv = [command, path] + (["--num_gpus", "1"] if command == "check-batch" else [])
    rc, err = _run(argv, capsys)
    _assert_clean(rc, err, argv)


@SETTINGS
@given(
    target=st.sampled_from(["good", "trunc", "garbage", "dtype", "empty", "missing", "."]),
    flags=st.dictionaries(
        st.sampled_from(["--train-iters", "--global-batch-size", "--consumed"]), text_numbers, max_size=2
    ),
)
def test_audit_never_traceback(data_dir, capsys, target, flags):
    argv = ["audit", os.path.join(data_dir, target), "--no-progress"]
    for k, v in flags.items():
        argv += [k, v] if v else [k]
    rc, err = _run(argv, capsys)
    _assert_clean(rc, err, argv)


#: pieces of a pasted command line: the launcher, its flags, the script, world flags and --source-epochs
PASTED_PIECES = [
    ["torchrun"],
    ["python", "-m", "torch.distributed.run"],
    ["srun"],
    ["--nproc_per_node", "2"],
    ["--nnodes=2"],
    ["--nnode", "1:4"],
    ["--master_port", "6000"],
    ["--world-size", "4"],
    ["--world-size", "x"],
    ["pretrain_gpt.py"],
    ["NCCL_DEBUG=INFO"],
    ["--source-epochs", "good=1"],
    ["--source-epochs", "torchrun"],
    ["--epochs", "1"],
    ["--global-batch-size", "8"],
    ["--deepspeed"],
    ["--zero-stage", "1"],
    ["model.micro_batch_size=2"],
    ["--micro-batch-size", "2"],
    ["cfg.yml"],
]


@SETTINGS
@given(pieces=st.lists(st.sampled_from(PASTED_PIECES), max_size=7), split_at=st.integers(0, 7))
def test_pasted_lines_never_traceback(data_dir, capsys, pieces, split_at):
    """Launcher, script, world flags, --source-epochs and fork flags in any order around valid Megatron-LM flags:
    a plan (0) or one line (2), never a traceback."""
    flags = [
        "--data-path",
        os.path.join(data_dir, "good"),
        "--micro-batch-size",
        "1",
        "--lr",
        "1e-4",
        "--eval-interval",
        "10",
        "--seq-length",
        "64",
        "--global-batch-size",
        "4",
        "--train-iters",
        "10",
    ]
    tokens = [t for piece in pieces for t in piece]
    argv = ["plan", "--framework-version", "0.16.1", *tokens[:split_at], *flags, *tokens[split_at:]]
    rc, err = _run(argv, capsys)
    _assert_clean(rc, err, argv)


#: pieces of a phased command line: phase groups (good and bad), transitions, lengths and per-phase passes
PHASE_PIECES = [
    ["--phase", "2"],
    ["--phase", "3"],
    ["--phase", "x"],
    ["--phase"],
    ["--phase", "0"],
    ["--phase-transition-iterations", "5"],
    ["--phase-transition-iterations", "5,8"],
    ["--phase-transition-iterations", "x"],
    ["--train-samples", "40"],
    ["--train-samples", "8"],
    ["--train-iters", "10"],
    ["--source-epochs", "good=1"],
    ["--source-epochs", "good=0.5"],
    ["--epochs", "1"],
    ["--epochs", "-1"],
    ["--data-path", "GOOD"],
    ["--data-path", "1", "GOOD"],
    ["--global-batch-size", "3"],
    ["--seed", "7"],
    ["--json"],
]


@SETTINGS
@given(pieces=st.lists(st.sampled_from(PHASE_PIECES), max_size=7))
def test_phased_lines_never_traceback(data_dir, capsys, pieces):
    """--phase groups and --phase-transition-iterations in any order and any count after valid Megatron-LM flags:
    a plan (0) or one line (2), never a traceback."""
    good = os.path.join(data_dir, "good")
    flags = [
        "--data-path",
        good,
        "--micro-batch-size",
        "1",
        "--lr",
        "1e-4",
        "--eval-interval",
        "10",
        "--seq-length",
        "64",
        "--global-batch-size",
        "4",
        "--train-samples",
        "40",
        "--phase-transition-iterations",
        "5",
    ]
    tokens = [good if t == "GOOD" else t for piece in pieces for t in piece]
    argv = ["plan", "--framework-version", "0.19.2", *flags, *tokens]
    rc, err = _run(argv, capsys)
    _assert_clean(rc, err, argv)
