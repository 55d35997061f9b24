"""``neox-epoch launch`` on a Megatron-LM line: the fast parts (no training run).

The line is split into our options and the user's line, planned by the same planner ``neox-epoch plan`` uses
(on real .bin/.idx files), rewritten to start ``neox_epoch.megatron_lm.worker``; the payload reaches the ranks
through one environment variable. The end-to-end runs under Megatron-LM's real training loop are in
tests/test_megatron_lm_training*.py.
"""

from __future__ import annotations

import json
import os
import shlex

import pytest

from neox_epoch import cli
from neox_epoch.errors import ConfigError
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.megatron_lm import line as ml
from neox_epoch.megatron_lm import payload as pl
from neox_epoch.megatron_lm import state_file
from neox_epoch.megatron_lm.launch import prepare

FLAGS = (
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 "
    "--micro-batch-size 2 --global-batch-size 4 --train-iters 10 --lr 1e-3 --lr-decay-iters 10 --split 100,0,0 "
    "--tokenizer-type NullTokenizer --vocab-size 512 --eval-iters 0 --eval-interval 1000"
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    d = tmp_path_factory.mktemp("mlm_corpus")
    a, b = str(d / "a_text_document"), str(d / "b_text_document")
    write_random_corpus(a, 1, 40, 20, 200)
    write_random_corpus(b, 2, 30, 20, 200)
    return a, b


def test_detects_megatron_lines_not_deepy() -> None:
    assert ml.is_megatron_line(["torchrun", "--nproc-per-node", "2", "pretrain_gpt.py", "--lr", "1"])
    assert ml.is_megatron_line(["python", "-m", "torch.distributed.run", "x.py"])
    assert ml.is_megatron_line(["python", "examples/pretrain_gpt.py"])
    assert ml.is_megatron_line(["pretrain_mamba.py", "--lr", "1"])
    assert not ml.is_megatron_line(["train.py", "configs/125M.yml", "configs/local_setup.yml"])
    assert not ml.is_megatron_line([])


def test_own_options_never_reach_megatron() -> None:
    opts, line = ml.split_options(
        [
            "--source-epochs",
            "a=1",
            "b=2",
            "--log-dir",
            "L",
            "--no-enforce",
            "--dry-run",
            "torchrun",
            "--nproc-per-node",
            "2",
            "pretrain_gpt.py",
            "--epochs",
            "3",
        ]
    )
    assert opts.source_epochs == ["a=1", "b=2"] and opts.log_dir == "L" and not opts.enforce and opts.dry_run
    assert line == ["torchrun", "--nproc-per-node", "2", "pretrain_gpt.py", "--epochs", "3"]
    opts, line = ml.split_options(["--epochs=2", "--", "python", "pretrain_gpt.py"])
    assert opts.epochs == "2" and line == ["python", "pretrain_gpt.py"]
    with pytest.raises(ConfigError, match="--log-interval"):
        ml.split_options(["--log-interval", "0", "pretrain_gpt.py"])


def test_worker_argv_per_launcher() -> None:
    w = ml.WORKER_MODULE
    cut = ml.cut_line(["torchrun", "--nproc-per-node", "2", "pretrain_gpt.py", "--lr", "1"])
    assert ml.worker_argv(cut, "PY") == ["torchrun", "--nproc-per-node", "2", "-m", w, "pretrain_gpt.py", "--lr", "1"]
    cut = ml.cut_line(["python3", "-m", "torch.distributed.run", "--standalone", "p/pretrain_gpt.py", "--lr", "1"])
    assert ml.worker_argv(cut, "PY") == [
        "python3",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "-m",
        w,
        "p/pretrain_gpt.py",
        "--lr",
        "1",
    ]
    assert ml.worker_argv(ml.cut_line(["python", "pretrain_gpt.py"]), "PY") == ["python", "-m", w, "pretrain_gpt.py"]
    assert ml.worker_argv(ml.cut_line(["pretrain_gpt.py", "--lr", "1"]), "PY") == [
        "PY",
        "-m",
        w,
        "pretrain_gpt.py",
        "--lr",
        "1",
    ]
    with pytest.raises(ConfigError, match="srun"):
        ml.worker_argv(ml.cut_line(["srun", "pretrain_gpt.py"]), "PY")
    with pytest.raises(ConfigError, match="no training script"):
        ml.cut_line(["torchrun", "--nproc-per-node", "2"])


def test_changes_one_line_each() -> None:
    flags = ["--train-iters", "10", "--data-path", "0.5", "a", "0.5", "b", "--lr", "1"]
    got = ml.changes(flags, "--train-iters 42 --mid-level-dataset-surplus 0 --data-path 71.0 a 97.0 b --lr 1")
    assert got == [
        "--train-iters 10 -> 42",
        "--mid-level-dataset-surplus (not given) -> 0",
        "--data-path 0.5 a 0.5 b -> 71.0 a 97.0 b",
    ]


def test_payload_round_trip_and_bad_value() -> None:
    p = pl.Payload(
        mode="exact",
        version="0.19.2",
        settings={"train_iters": 3},
        log_dir="x",
        enforce=False,
        log_interval=2,
        warnings=["w"],
    )
    assert pl.from_environ({pl.ENV_VAR: p.encode()}) == p
    assert pl.from_environ({}) is None
    with pytest.raises(ConfigError, match=pl.ENV_VAR):
        pl.decode("not base64!")


def test_prepare_applies_plans_exact_flags(corpus: tuple[str, str]) -> None:
    a, b = corpus
    line = [
        "torchrun",
        "--nproc-per-node",
        "2",
        "pretrain_gpt.py",
        *shlex.split(FLAGS),
        "--data-path",
        "0.5",
        a,
        "0.5",
        b,
    ]
    argv, payload, shown = prepare(["--source-epochs", "a_text_document=1", "b_text_document=2", *line], "PY")
    # the same flags as `neox-epoch plan --json --source-epochs ...` on the pasted line
    plan_argv = ["plan", "--json", "--source-epochs", "a_text_document=1", "b_text_document=2", *line]
    parser = cli.build_parser(plan_argv)
    args, extra = parser.parse_known_args(plan_argv)
    args.extra, args.raw_argv = extra, plan_argv
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        args.func(args)
    planned = json.loads(out.getvalue())["settings"]
    assert payload.mode == "exact" and payload.settings["megatron_flags"] == planned["megatron_flags"]
    assert argv[:6] == ["torchrun", "--nproc-per-node", "2", "-m", ml.WORKER_MODULE, "pretrain_gpt.py"]
    assert argv[-len(shlex.split(planned["megatron_flags"])) :] == shlex.split(planned["megatron_flags"])
    assert f"neox_epoch: --train-iters 10 -> {planned['train_iters']}" in shown[0]
    assert any(s.startswith("neox_epoch: --data-path 0.5") for s in shown)
    assert payload.settings["targets"] == planned["targets"]


def test_plain_line_only_observes(corpus: tuple[str, str]) -> None:
    a, _ = corpus
    line = ["python", "pretrain_gpt.py", *shlex.split(FLAGS), "--data-path", a]
    argv, payload, shown = prepare(["--log-dir", "L", *line], "PY")
    assert payload.mode == "observe" and payload.settings == {} and payload.log_dir == "L"
    assert argv == ["python", "-m", ml.WORKER_MODULE, "pretrain_gpt.py", *line[2:]]
    assert "only observe" in shown[0]


def test_cli_dry_run_and_bad_name(corpus: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = corpus
    line = ["torchrun", "pretrain_gpt.py", *shlex.split(FLAGS), "--data-path", "1", a, "1", b]
    assert cli.main(["launch", "--dry-run", "--epochs", "1", *line]) == 0
    out = capsys.readouterr()
    got = json.loads(out.out.splitlines()[-1])
    assert got["mode"] == "exact" and pl.ENV_VAR in got["env"] and "-m" in got["argv"]
    assert list(got)[:2] == ["version", "schema"] and got["schema"] == 1  # neox_epoch.util.schema's stamp
    assert "neox_epoch: --train-iters 10 ->" in out.err
    assert cli.main(["launch", "--dry-run", "--source-epochs", "nope=1", *line]) == 2
    assert "nope" in capsys.readouterr().err


def test_state_file_round_trip(tmp_path: object) -> None:
    root = str(tmp_path)
    assert state_file.write(root, 7, {"x": 1}) is None  # no iteration directory: nothing written
    os.makedirs(state_file.iteration_dir(root, 7))
    path = state_file.write(root, 7, {"x": 1})
    assert path is not None and path.endswith(os.path.join("iter_0000007", state_file.STATE_NAME))
    assert state_file.read(root, 7) == {"x": 1} and state_file.read(root, 8) is None
    with open(path, "w", encoding="utf-8") as f:
        f.write("{cut")
    with pytest.raises(ConfigError, match=state_file.STATE_NAME):
        state_file.read(root, 7)


def _checkpoint(root: str, iteration: int, state: dict[str, object]) -> None:
    os.makedirs(state_file.iteration_dir(root, iteration))
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w", encoding="utf-8") as f:
        f.write(str(iteration))
    state_file.write(root, iteration, state)


def test_resume_with_another_batch_and_a_rewritten_corpus(tmp_path: object) -> None:
    from neox_epoch.formats.fingerprint import fingerprint
    from neox_epoch.megatron_lm.resuming import ChangedData, check_data, resume_point, resumed_iters

    d = str(tmp_path)
    a, b = os.path.join(d, "a_text_document"), os.path.join(d, "b_text_document")
    write_random_corpus(a, 1, 40, 20, 200)
    write_random_corpus(b, 2, 30, 20, 200)
    root = os.path.join(d, "ckpt")
    fp = fingerprint([a, b], 64, 1234).to_dict()
    _checkpoint(root, 20, {"consumed_samples": 80, "global_batch_size": 4, "fingerprint": fp})
    assert resume_point(["--save", os.path.join(d, "none")]) is None
    point = resume_point(["--lr", "1", "--load", root])
    assert point is not None and (point.iteration, point.consumed_samples, point.global_batch_size) == (20, 80, 4)
    assert resumed_iters(point, 168, 8)[0] == 31  # 20 + (168 - 80) // 8
    iters, why = resumed_iters(point, 170, 8)
    assert iters == 31 and "the last 2 samples" in why
    check_data(point, [a, b], 64, 1234)  # the same data: nothing
    write_random_corpus(b, 7, 30, 20, 200)
    with pytest.raises(ChangedData, match="source 'b_text_document' tokens"):
        check_data(point, [a, b], 64, 1234)


class _Recorder:
    """Stands in for TensorBoard's SummaryWriter (tensorboard is not installed on the test stacks) and W&B."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.calls.append((tag, value, step))

    def log(self, data: dict[str, float], step: int) -> None:
        self.calls.append((dict(data), step))


def test_scalars_keyed_on_consumed_samples() -> None:
    from types import SimpleNamespace

    from neox_epoch.megatron_lm.writers import CONSUMED_KEY, MegatronWriters

    tb, wb = _Recorder(), _Recorder()
    hooks = SimpleNamespace(counters=SimpleNamespace(consumed_samples=88))
    writer = MegatronWriters(tb, wb).scalar_writer(hooks)
    writer.add_scalar("neox_epoch/passes/a", 0.5, 21)  # the counters' step is the iteration
    assert tb.calls == [("neox_epoch/passes/a", 0.5, 88)]
    assert wb.calls == [({"neox_epoch/passes/a": 0.5, CONSUMED_KEY: 88}, 21)]
    assert MegatronWriters().scalar_writer(hooks) is None
