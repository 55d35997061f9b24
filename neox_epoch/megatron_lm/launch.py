"""``neox-epoch launch [--epochs N | --source-epochs NAME=E ...] torchrun ... pretrain_gpt.py FLAGS``.

The user's Megatron-LM line as they run it. In order:

1. our options are split off (they never reach Megatron-LM's argparse: :mod:`neox_epoch.megatron_lm.line`),
2. with passes asked, the line is planned by the planner ``neox-epoch plan`` uses on a pasted line (the same
   source names) and its exact flags (``settings.megatron_flags``: train iterations or samples, data-path
   weights, surplus 0, the LR lengths) are appended after the script's flags (argparse: the last one wins);
   each change is printed on stderr before the start, with the plan's warnings (a remainder, ...),
3. the launch's decisions go to every rank in ``$NEOX_EPOCH_MEGATRON_LM`` (the environment is otherwise passed
   unchanged),
4. the script is replaced by ``-m neox_epoch.megatron_lm.worker pretrain_gpt.py`` (torchrun's ``-m``, or
   python's) and the launcher runs as a subprocess: its exit code is returned, SIGINT/SIGTERM are forwarded.

Without passes the line runs as given and the hooks only observe. ``--dry-run`` prints the argv and the
environment value as one JSON line instead of starting.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.megatron_lm.line import LaunchOptions, changes, cut_line, split_options, values_of, worker_argv
from neox_epoch.megatron_lm.payload import ENV_VAR, Payload
from neox_epoch.util.schema import stamp


def register(sub: Any) -> None:
    """The ``launch`` command: NeoX's (deepy form) plus the Megatron-LM line, told apart by :func:`dispatch`."""
    from neox_epoch.neox import launch as neox_launch

    neox_launch.register(sub)
    parser = sub.choices["launch"]
    parser.epilog = (parser.epilog or "") + (
        "\n  neox-epoch launch --source-epochs web=1 code=2 torchrun --nproc-per-node 8 pretrain_gpt.py FLAGS"
        "   # Megatron-LM: [--epochs N | --source-epochs NAME=E ...] [--log-dir DIR] [--no-enforce] [--dry-run] before"
        " the line (docs/megatron-lm.md)"
    )
    parser.set_defaults(func=dispatch, accepts_extra=True)


def dispatch(args: argparse.Namespace) -> int:
    """A Megatron-LM line goes to :func:`run`; anything else to NeoX's launch, unchanged."""
    from neox_epoch.megatron_lm.line import is_megatron_line
    from neox_epoch.neox import launch as neox_launch

    raw = list(getattr(args, "raw_argv", None) or [])
    tokens = raw[raw.index("launch") + 1 :] if "launch" in raw else []
    if is_megatron_line(split_options(tokens)[1]):
        return run(tokens)
    if getattr(args, "extra", None):
        raise ConfigError(f"launch: unrecognized arguments: {' '.join(args.extra)}")
    return neox_launch.run(args)


def plan_exact(opts: LaunchOptions, line: Sequence[str]) -> dict[str, Any]:
    """The exact plan of ``line`` as ``neox-epoch plan --json`` computes it (the same parser and planner)."""
    from neox_epoch import cli

    argv = ["plan", "--json"]
    if opts.epochs is not None:
        argv += ["--epochs", opts.epochs]
    if opts.source_epochs:
        argv += ["--source-epochs", *opts.source_epochs]
    if opts.framework_version:
        argv += ["--framework-version", opts.framework_version]
    argv += list(line)
    parser = cli.build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    args.extra, args.raw_argv, args.main = extra, argv, cli.main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        args.func(args)
    return dict(json.loads(out.getvalue()))


def mirror_version(opts: LaunchOptions) -> str:
    from neox_epoch.formats import detect

    return detect.version_to_mirror(opts.framework_version, False)


def prepare(tokens: Sequence[str], python: str | None = None) -> tuple[list[str], Payload, list[str]]:
    """(the argv to run, the payload for the ranks, the lines to show on stderr) for ``tokens`` after ``launch``."""
    opts, line = split_options(tokens)
    if not line:
        raise ConfigError(
            "launch: no command line after the options; usage: neox-epoch launch [--epochs N] torchrun "
            "... pretrain_gpt.py FLAGS"
        )
    if opts.stages is not None:
        raise ConfigError(
            "launch: --stages: not supported for Megatron-LM lines yet; give --epochs or "
            "--source-epochs (neox-epoch plan --stages shows a staged plan)"
        )
    if opts.epochs is not None and opts.source_epochs:
        raise ConfigError("launch: give --epochs or --source-epochs, not both")
    cut = cut_line(line)
    shown: list[str] = []
    if opts.epochs is None and not opts.source_epochs:
        payload = Payload(
            mode="observe",
            version=mirror_version(opts),
            log_dir=opts.log_dir,
            enforce=opts.enforce,
            log_interval=opts.log_interval,
        )
        shown.append(
            "neox_epoch: no passes asked (--epochs / --source-epochs): the line runs as given; the hooks "
            "only observe and log"
        )
        return worker_argv(cut, python or sys.executable), payload, shown
    plan = plan_exact(opts, _planned_line(line, cut.flags))
    settings = dict(plan.get("settings") or {})
    flags = str(settings.get("megatron_flags") or "")
    if not flags:
        raise ConfigError(
            "launch: the plan has no exact flags for this line (a phased line?); run neox-epoch plan on it to see why"
        )
    import shlex

    flags = _resumed(cut.flags, flags, plan, shown, settings)
    new_flags = [*cut.flags, *shlex.split(flags)]
    why = {str(e.get("key")): str(e.get("why", "")) for e in settings.get("schedule") or [] if isinstance(e, dict)}
    for change in changes(cut.flags, flags):
        name = change.split(" ", 1)[0]
        if not change.startswith("--use-checkpoint-opt") and (name != "--train-iters" or "resume" not in settings):
            shown.append(f"neox_epoch: {change}" + (f": {why[name]}" if why.get(name) else ""))
    warnings = [str(w.get("text", w)) for w in plan.get("warnings") or [] if isinstance(w, dict)]
    shown += [f"neox_epoch: warning: {w}" for w in warnings]
    payload = Payload(
        mode="exact",
        version=str(plan.get("framework_version") or mirror_version(opts)),
        settings=settings,
        log_dir=opts.log_dir,
        enforce=opts.enforce,
        log_interval=opts.log_interval,
        warnings=warnings,
    )
    cut = type(cut)(cut.launcher, cut.script, new_flags)
    return worker_argv(cut, python or sys.executable), payload, shown


def _planned_line(line: list[str], flags: list[str]) -> list[str]:
    """The line to plan: a resume from a checkpoint planned with another global batch keeps that plan's data (the
    same targets, weights and split: the same blend), so it is planned at the checkpoint's global batch; only the
    iterations follow this launch's batch (:func:`_resumed`)."""
    from neox_epoch.megatron_lm.resuming import resume_point

    point = resume_point(flags)
    gbs = values_of(flags, "--global-batch-size")
    if (
        point is None
        or not point.planned_global_batch_size
        or not gbs
        or gbs[-1] == str(point.planned_global_batch_size)
    ):
        return line
    return [*line, "--global-batch-size", str(point.planned_global_batch_size)]


def _resumed(
    line_flags: list[str], flags: str, plan: dict[str, Any], shown: list[str], settings: dict[str, Any]
) -> str:
    """The exact flags for a launch that resumes from a checkpoint carrying neox-epoch's state: train_iters
    counted from its consumed samples with this launch's global batch (:mod:`neox_epoch.megatron_lm.resuming`)."""
    import shlex

    from neox_epoch.megatron_lm.resuming import check_data, resume_point, resumed_iters

    tokens = shlex.split(flags)
    point = resume_point([*line_flags, *tokens])
    if point is None:
        return flags
    train = [s for s in plan.get("sources") or [] if s.get("split") == "train"]
    seed = (values_of([*line_flags, *tokens], "--seed") or ["1234"])[-1]
    check_data(point, [str(s["prefix"]) for s in train], int(plan["seq_length"]), int(seed))
    if "--train-iters" not in tokens:
        return flags
    request = point.dataset_size or int(plan["train_samples"])  # the split the checkpoint's run built
    gbs = values_of(line_flags, "--global-batch-size")
    iters, why = resumed_iters(point, request, int(gbs[-1]) if gbs else int(plan["global_batch_size"]))
    planned = int(tokens[tokens.index("--train-iters") + 1])
    if iters == planned:
        return flags
    tokens[tokens.index("--train-iters") + 1] = str(iters)
    shown.append(
        f"neox_epoch: resume: --train-iters {planned} -> {iters}: {why}; the train split is still built "
        f"for the checkpoint's {request} samples (the hooks pass that request to the builder)"
    )
    if not any(t.startswith("--override-opt") or t.startswith("--use-checkpoint-opt") for t in line_flags):
        tokens.append("--use-checkpoint-opt_param-scheduler")
        shown.append(
            "neox_epoch: resume: --use-checkpoint-opt_param-scheduler (not given) -> set: the LR and weight "
            "decay schedules stay the checkpoint's, counted in samples (the global batch changed)"
        )
    settings["resume"] = {
        "train_iters": iters,
        "train_request": request,
        "why": why,
        "planned_global_batch_size": point.planned_global_batch_size,
    }
    return shlex.join(tokens)


def run_subprocess(argv: list[str], env: dict[str, str]) -> int:
    """Run the launcher; forward SIGINT/SIGTERM to it; its exit code (128 + signal when it was killed)."""
    try:
        proc = subprocess.Popen(argv, env=env)
    except OSError as err:
        raise ConfigError(f"launch: cannot start {argv[0]!r} ({err}); is it on PATH?") from err
    previous: dict[signal.Signals, Any] = {}

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, forward)
    try:
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - rc if rc < 0 else rc


def run(tokens: Sequence[str]) -> int:
    """``neox-epoch launch`` on a Megatron-LM line (``tokens``: what follows ``launch``)."""
    argv, payload, shown = prepare(tokens)
    opts, _ = split_options(tokens)
    for line in shown:
        print(line, file=sys.stderr, flush=True)
    value = payload.encode()
    if opts.dry_run:
        print(
            json.dumps(
                {
                    **stamp(),
                    "argv": argv,
                    "env": {ENV_VAR: value},
                    "mode": payload.mode,
                    "settings": payload.settings,
                    "changes": shown,
                }
            ),
            flush=True,
        )
        return 0
    env = dict(os.environ)
    env[ENV_VAR] = value
    return run_subprocess(argv, env)
