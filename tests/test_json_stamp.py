"""The ``version``/``schema`` stamp of neox-epoch's JSON (neox_epoch.util.schema) and the global options.

Every JSON output starts with ``{"version": neox_epoch.__version__, "schema": SCHEMA, ...}``; the run log's header
records carry it too, and ``report`` reads a log without it (written before the stamp) as schema 0 and says so.
``--debug``/``-v`` work before or after the command's name, the same either way.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest
from paths import REPO
from run_logs import blend_values, launch

from neox_epoch import __version__
from neox_epoch.cli import main
from neox_epoch.demo import write_demo_corpus
from neox_epoch.formats.neox_config import EpochBlock
from neox_epoch.formats.runlog import JSONL_NAME
from neox_epoch.util.schema import SCHEMA, UNSTAMPED

ROOT = REPO  # the checkout
CONFIG = "configs/one_source_one_epoch.yml"
#: a pasted Megatron-LM line on the demo corpus (the demo's own)
MEGATRON = [
    "--data-path",
    "demo/data/web_text_document",
    "--split",
    "98,1,1",
    "--seq-length",
    "512",
    "--micro-batch-size",
    "4",
    "--global-batch-size",
    "16",
    "--lr",
    "1e-4",
    "--eval-iters",
    "2",
    "--eval-interval",
    "100",
    "--num-layers",
    "2",
    "--epochs",
    "1",
    "--framework-version",
    "0.16.1",
]
#: its train_iters for one pass over web (the plan's own number, as neox-epoch plan prints it)
MEGATRON_ITERS = 75


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The demo corpus and the shipped configs (they name demo/data/... relative to the working directory)."""
    d = tmp_path_factory.mktemp("stamp")
    write_demo_corpus(str(d / "demo" / "data"))
    shutil.copytree(os.path.join(ROOT, "configs"), d / "configs")
    return str(d)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def stamped_json(text: str) -> dict[str, Any]:
    """The JSON object printed, after checking that it starts with the stamp."""
    obj = json.loads(text)
    assert list(obj)[:2] == ["version", "schema"], list(obj)[:4]
    assert (obj["version"], obj["schema"]) == (__version__, SCHEMA) == (__version__, 1)
    return dict(obj)


@pytest.mark.parametrize("argv", [["plan", CONFIG, "--json"], ["plan", *MEGATRON, "--json"]], ids=["neox", "megatron"])
def test_plan_json_is_stamped(work: str, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    monkeypatch.chdir(work)
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert stamped_json(out)["train_iters"] == (77 if argv[1] == CONFIG else MEGATRON_ITERS)


@pytest.mark.parametrize("where", ["before", "after", "end"])
def test_global_options_anywhere(where: str, work: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    """``neox-epoch --debug -v plan ...``, ``neox-epoch plan --debug -v ...`` and the options last: one parse."""
    monkeypatch.chdir(work)
    from neox_epoch.cli import build_parser, command_tokens

    tail = [*MEGATRON, "--json"]
    argv = {
        "before": ["--debug", "-v", "plan", *tail],
        "after": ["plan", "--debug", "-v", *tail],
        "end": ["plan", *tail, "--verbose", "--debug"],
    }[where]
    args, extra = build_parser(argv).parse_known_args(argv)
    assert (args.debug, args.verbose, args.command) == (True, True, "plan")
    assert command_tokens(argv, "plan") == ["plan", *tail]  # what plan re-reads as the Megatron-LM line
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert stamped_json(out)["train_iters"] == MEGATRON_ITERS


def test_global_options_default_off_and_debug_raises_after_the_command(
    work: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    """Without the options both are off; with ``--debug`` after the command an internal error raises (the
    traceback), as with ``--debug`` before it, where without it the one line says to rerun with --debug."""
    from neox_epoch import demo
    from neox_epoch.cli import build_parser

    args, _ = build_parser(["plan", CONFIG]).parse_known_args(["plan", CONFIG])
    assert (args.debug, args.verbose) == (False, False)

    def broken(args: Any) -> int:
        raise RuntimeError("boom")

    monkeypatch.chdir(work)
    monkeypatch.setattr(demo, "run", broken)  # a bug stand-in: no input makes our own code fail on purpose
    assert main(["demo"]) == 3
    assert "internal error: RuntimeError: boom" in capsys.readouterr().err
    for argv in (["demo", "--debug"], ["--debug", "demo"]):
        with pytest.raises(RuntimeError, match="boom"):
            main(argv)


def test_launch_line_skips_global_options() -> None:
    """``neox-epoch launch --debug torchrun ...``: the Megatron-LM line starts at torchrun."""
    from neox_epoch.megatron_lm.line import split_options

    opts, line = split_options(["--debug", "--epochs", "1", "-v", "torchrun", "pretrain_gpt.py", "--lr", "1"])
    assert opts.epochs == "1" and line == ["torchrun", "pretrain_gpt.py", "--lr", "1"]


@pytest.fixture(scope="module")
def run_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A run log written by the hooks' own writers (tests/run_logs.py): one launch of two sources."""
    from neox_epoch.formats.corpus import write_random_corpus

    d = tmp_path_factory.mktemp("runlog")
    for i, name in enumerate(("web", "code")):
        write_random_corpus(str(d / name), i + 1, 60, 5, 200)
    values = blend_values([str(d / "web"), str(d / "code")], [1.0, 1.0], 32, 4)
    return os.path.dirname(launch(str(d / "run"), values, EpochBlock(epochs=1), 0, None, 10))


def _records(path: str) -> list[dict[str, Any]]:
    with open(os.path.join(path, JSONL_NAME), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_run_log_header_records_are_stamped(run_log: str) -> None:
    records = _records(run_log)
    plan = [r for r in records if r["event"] == "plan"]
    assert len(plan) == 1 and (plan[0]["version"], plan[0]["schema"]) == (__version__, SCHEMA)
    assert all("schema" not in r for r in records if r["event"] in ("counters", "pass_start", "final"))


def test_report_reads_an_older_log_and_says_which_schema(
    run_log: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same log with the stamp removed (as neox-epoch wrote it before the stamp): the same report, schema 0."""
    code, out, err = run(["report", run_log, "--json"], capsys)
    assert code == 0, err
    new = stamped_json(out)
    assert [(la["schema"], la["version"]) for la in new["launches"]] == [(SCHEMA, __version__)]
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    lines = [{k: v for k, v in r.items() if k not in ("version", "schema")} for r in _records(run_log)]
    (old_dir / JSONL_NAME).write_text("".join(json.dumps(r) + "\n" for r in lines))
    code, out, err = run(["report", str(old_dir), "--json"], capsys)
    assert code == 0, err
    old = stamped_json(out)
    assert [(la["schema"], la["version"]) for la in old["launches"]] == [(UNSTAMPED, None)]
    strip = ("files", "launches")
    assert {k: v for k, v in old.items() if k not in strip} == {k: v for k, v in new.items() if k not in strip}
    code, out, err = run(["report", str(old_dir), "--html", str(tmp_path / "r.html")], capsys)
    assert code == 0 and "read run log schema 0 (no version field: written before neox-epoch stamped" in out
    code, out, err = run(["report", run_log, "--html", str(tmp_path / "n.html")], capsys)
    assert code == 0 and f"read run log schema {SCHEMA} (neox-epoch {__version__})" in out


@pytest.mark.parametrize(
    "stamp, said",
    [
        ({"schema": 2, "version": "9.0"}, "schema 2 (neox-epoch 9.0, newer than this neox-epoch"),
        ({"schema": "1"}, "\"schema\": expected an integer >= 1 (the JSON format version), found '1'"),
        ({"schema": 1, "version": 1}, '"version": expected the neox-epoch version that wrote it (a string), found 1'),
    ],
    ids=["newer", "bad-schema", "bad-version"],
)
def test_report_on_another_stamp(
    run_log: str, tmp_path: Any, stamp: dict[str, Any], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newer schema is read and named with what to do; a stamp of another type is one error line (exit 2)."""
    lines = [{**r, **stamp} if r["event"] == "plan" else r for r in _records(run_log)]
    (tmp_path / JSONL_NAME).write_text("".join(json.dumps(r) + "\n" for r in lines))
    code, out, err = run(["report", str(tmp_path), "--html", str(tmp_path / "r.html")], capsys)
    if "newer" in said:
        assert code == 0 and said in out and "upgrade neox-epoch to read it" in out
    else:
        assert code == 2 and said in err and f"{JSONL_NAME}:1: plan:" in err and len(err.splitlines()) == 1
