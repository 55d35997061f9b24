"""``neox-epoch resume-check``: reads OLD (a checkpoint or the run's ``neox_epoch.jsonl``) and picks the checker from
a table keyed on the checkpoint's framework: GPT-NeoX (:mod:`neox_epoch.resume.neox`), Megatron-LM
(:mod:`neox_epoch.resume.megatron`), megatron-core with neox-epoch's counters (:mod:`neox_epoch.resume.mcore`)."""

from __future__ import annotations

import argparse
import glob
import json
import os
from collections.abc import Callable
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.formats.checkpoint import Checkpoint, read_checkpoint
from neox_epoch.formats.detect import version_to_mirror
from neox_epoch.formats.runlog import checkpoint_records, log_file
from neox_epoch.resume.model import ResumeCheck
from neox_epoch.resume.neox import check, is_run_log
from neox_epoch.resume.render import render, to_json
from neox_epoch.util.helptext import examples
from neox_epoch.util.schema import stamped


def register(sub: Any) -> None:
    p = sub.add_parser(
        "resume-check",
        help="what a resume with a changed config skips or repeats (NeoX, Megatron-LM)",
        description="Before resuming from a checkpoint with another batch, blend, seq_length, train_iters or world: "
        "where the resumed run restarts in each source, which samples it skips or trains again, and how evaluation "
        "resumes. The checkpoint (or the run's neox_epoch.jsonl) comes first, then the new run: NeoX config files "
        "or a pasted Megatron-LM command line.",
        **examples(
            "neox-epoch resume-check checkpoints/ new.yml local_setup.yml --world-size 8   # GPT-NeoX",
            "neox-epoch resume-check logs/neox_epoch.jsonl new.yml --iteration 2000       # from the run log",
            "neox-epoch resume-check checkpoints/ pretrain_gpt.py --data-path data/web "
            "--micro-batch-size 2 ...   # Megatron-LM",
        ),
    )
    p.add_argument(
        "checkpoint",
        help="the checkpoint the run will load: its save directory (with 'latest' or "
        "latest_checkpointed_iteration.txt) or a tag; or, for a NeoX run with the plugin or a megatron-core run "
        "with the live counters, its neox_epoch.jsonl (or the directory holding it): each checkpoint is "
        "recorded there",
    )
    p.add_argument(
        "--iteration",
        type=int,
        help="with a JSONL: the iteration of the checkpoint the resume loads (default: the last one recorded)",
    )
    p.add_argument(
        "configs",
        nargs="*",
        help="the NeoX config files the run resumes with, or its Megatron-LM "
        "command line (pretrain_gpt.py --data-path ...)",
    )
    p.add_argument(
        "--world-size",
        type=int,
        help="GPUs the resumed run uses (else the config's global_num_gpus or "
        "hostfile, as NeoX counts them; for Megatron-LM its own --world-size)",
    )
    p.add_argument(
        "--cache",
        help="megatron-core runs with the live counters (a DeepSpeed checkpoint resumed with "
        "its DeepSpeed config): the run's path_to_cache, whose blend gives each source's draws",
    )
    p.add_argument("--framework-version", help="Megatron-LM checkpoints: the megatron-core version to mirror")
    p.add_argument("--force-version", action="store_true", help="plan an unverified megatron-core version")
    p.add_argument(
        "--exposure",
        action="store_true",
        help="count each source's input tokens by times seen over the "
        "whole run, resumed and continued unchanged, with the audit's exposure computation (GPT-NeoX: its "
        "train index files; Megatron-LM: the orders megatron-core builds; megatron-core: needs --cache)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object (keys in docs/resume-check.md)")
    p.set_defaults(func=run, accepts_extra=True)


def _megatron_tokens(args: argparse.Namespace) -> list[str] | None:
    """The Megatron-LM command line after the checkpoint (neox-epoch's own options removed), if it is one."""
    from neox_epoch.plan.from_megatron import is_megatron_argv, megatron_argv

    raw = list(getattr(args, "raw_argv", []) or [])
    tokens = raw[raw.index("resume-check") + 1 :] if "resume-check" in raw else raw
    if args.checkpoint in tokens:
        tokens.remove(args.checkpoint)
    return megatron_argv(tokens) if is_megatron_argv(tokens) else None


def _neox(
    ckpt: Checkpoint,
    args: argparse.Namespace,
    tokens: list[str] | None,
    records: list[tuple[int, dict[str, Any]]] | None,
) -> ResumeCheck:
    return check(args.checkpoint, list(args.configs), args.world_size, args.exposure, args.iteration, records)


def _megatron(
    ckpt: Checkpoint,
    args: argparse.Namespace,
    tokens: list[str] | None,
    records: list[tuple[int, dict[str, Any]]] | None,
) -> ResumeCheck:
    from neox_epoch.resume.megatron import check as megatron_check

    assert tokens is not None  # run() refuses a Megatron-LM checkpoint without its command line
    return megatron_check(ckpt, tokens, version_to_mirror(args.framework_version, args.force_version), args.exposure)


def _mcore(
    ckpt: Checkpoint,
    args: argparse.Namespace,
    tokens: list[str] | None,
    records: list[tuple[int, dict[str, Any]]] | None,
) -> ResumeCheck:
    from neox_epoch.resume.mcore import check as mcore_check

    return mcore_check(ckpt, args.configs[0], args.world_size, args.cache, args.exposure)


#: the checker for each framework a checkpoint (or a run's log) can come from
CHECKERS: dict[
    str,
    Callable[[Checkpoint, argparse.Namespace, list[str] | None, list[tuple[int, dict[str, Any]]] | None], ResumeCheck],
] = {"neox": _neox, "megatron": _megatron, "megatron-core": _mcore}


def _megatron_checkpoint_of(
    path: str, records: list[tuple[int, dict[str, Any]]], tokens: list[str], iteration: int | None
) -> str:
    """The iteration directory a Megatron-LM run's log (written under ``neox-epoch launch``) names: the resumed
    line's ``--load`` (else ``--save``) and the recorded iteration (``--iteration``, default the last)."""
    from neox_epoch.megatron_lm.line import values_of
    from neox_epoch.megatron_lm.state_file import iteration_dir

    given = values_of(tokens, "--load") or values_of(tokens, "--save")
    root = given[-1] if given else None
    if not root:
        raise ConfigError(
            f"{path}: a Megatron-LM run's log: give its checkpoint directory, or --load in the resumed command line"
        )
    done = sorted({int(r.get("iteration", 0)) for _, r in records})
    at = done[-1] if iteration is None else iteration
    if at not in done:
        raise ConfigError(f"{path}: no checkpoint record for iteration {at}; recorded: {done}")
    return iteration_dir(root, at)


def run(args: argparse.Namespace) -> int:
    tokens = _megatron_tokens(args)
    if tokens is None:
        if args.extra or not args.configs:
            raise ConfigError(
                f"resume-check: {' '.join(args.extra) or 'no config'}: expected NeoX config files "
                "(or a Megatron-LM command line with a Megatron-LM checkpoint)"
            )
        for path in args.configs:
            if not glob.glob(path) and not os.path.exists(path):
                raise ConfigError(f"{path}: config file not found")
    if args.iteration is not None and not is_run_log(args.checkpoint):
        raise ConfigError(
            f"--iteration {args.iteration}: only with a run's neox_epoch.jsonl; a checkpoint "
            "directory resumes from its 'latest' (or give the global_stepN tag itself)"
        )
    records = checkpoint_records(log_file(args.checkpoint)) if is_run_log(args.checkpoint) else None
    if records is not None and tokens is not None:  # a Megatron-LM run's log (neox-epoch launch): its checkpoint
        args.checkpoint, records = _megatron_checkpoint_of(args.checkpoint, records, tokens, args.iteration), None
    if records is not None:  # a run's JSONL: the live counters' records make it a megatron-core run's
        from neox_epoch.resume.mcore import checkpoint_from_log

        ckpt = checkpoint_from_log(log_file(args.checkpoint), records, args.iteration) or Checkpoint(
            "neox", args.checkpoint, 0
        )
    else:
        ckpt = read_checkpoint(args.checkpoint)
    wanted = {
        "megatron": "a Megatron-LM checkpoint; give its Megatron-LM command line (--data-path ...)",
        "megatron-core": "a megatron-core run with neox-epoch's counters (DeepSpeed checkpoint); give the one "
        "DeepSpeed config (JSON) it resumes with, and --cache for per-source draws",
        "neox": "a GPT-NeoX checkpoint; give NeoX config files",
    }[ckpt.framework]
    if (tokens is not None) != (ckpt.framework == "megatron") or (
        ckpt.framework == "megatron-core" and (len(args.configs) != 1 or args.exposure and args.cache is None)
    ):
        raise ConfigError(
            f"{args.checkpoint}: {wanted} for the resumed run"
            + (" (--exposure needs --cache)" if args.exposure and ckpt.framework == "megatron-core" else "")
        )
    if args.cache is not None and ckpt.framework != "megatron-core":
        raise ConfigError(
            f"--cache {args.cache}: only for a megatron-core run's DeepSpeed checkpoint with the live "
            f"counters; {args.checkpoint} is {wanted.split(';')[0]}"
        )
    rc = CHECKERS[ckpt.framework](ckpt, args, tokens, records)
    print(json.dumps(stamped(to_json(rc)), indent=1) if args.json else render(rc))
    return 1 if rc.findings else 0
