"""``neox-epoch check-batch``: is the batch consistent with the world the deepspeed launcher starts?

Exit codes: 0 consistent; 1 the input was inconsistent and ``--fix`` wrote a consistent config;
2 bad input or an inconsistent batch (the message carries the fix). DeepSpeed is imported only when
the command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
from typing import Any

from neox_epoch.batch.config import LauncherSettings
from neox_epoch.errors import BatchError
from neox_epoch.util.helptext import examples

_FLAGS = ("hostfile", "include", "exclude", "num_nodes", "num_gpus", "launcher")


def register(subparsers: Any) -> None:
    """Add the ``check-batch`` parser to ``subparsers`` and set ``func=run``."""
    p = subparsers.add_parser(
        "check-batch",
        help="check train_batch_size = micro * grad_accum * dp against the world the launcher starts",
        description=(
            "Compute the world `deepspeed <flags>` will start (with DeepSpeed's own runner functions), "
            "dp = world / (pp * mp), and check train_batch_size = micro * grad_accum * dp with DeepSpeed's "
            "derivation rules; for NeoX configs also compare NeoX's own GPU count. Exit 0 consistent, "
            "1 inconsistent input fixed with --fix, 2 bad input or inconsistent batch."
        ),
        **examples(
            "neox-epoch check-batch configs/my.yml --hostfile hosts --num_gpus 8   # as deepspeed would start it",
            "neox-epoch check-batch ds_config.json --num_gpus 4 --fix fixed.json   # a DeepSpeed config",
        ),
    )
    p.add_argument(
        "configs",
        nargs="+",
        metavar="CONFIG",
        help="NeoX .yml files (merged like deepy.py) or one DeepSpeed .json config",
    )
    p.add_argument(
        "-H", "--hostfile", help="hostfile as passed to deepspeed (default: the config's, else /job/hostfile)"
    )
    p.add_argument("-i", "--include", help='deepspeed --include filter, e.g. "node1:0,1@node2"')
    p.add_argument("-e", "--exclude", help="deepspeed --exclude filter")
    p.add_argument("--num_nodes", type=int, help="deepspeed --num_nodes: use the first N hosts")
    p.add_argument("--num_gpus", "--num_accelerators", type=int, help="deepspeed --num_gpus: processes per host")
    p.add_argument("--launcher", help="deepspeed --launcher backend for multi-node runs (pdsh, openmpi, slurm, ...)")
    p.add_argument("--fix", metavar="OUT", help="write a consistent config to OUT keeping train_batch_size")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.set_defaults(func=run)


def _overrides(args: argparse.Namespace) -> LauncherSettings:
    given: dict[str, Any] = {name: getattr(args, name, None) for name in _FLAGS}  # str | int | None each
    return LauncherSettings(**given)


def _flag_words(args: argparse.Namespace) -> list[str]:
    words: list[str] = []
    for name in _FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            words += [f"--{name}", str(value)]
    return words


def suggested_fix_path(config_path: str) -> str:
    """``a.yml`` -> ``a.fixed.yml``: where the error message suggests writing the fix."""
    stem, ext = os.path.splitext(config_path)
    return f"{stem}.fixed{ext}"


def format_table(result: Any) -> str:
    """The human-readable summary: world, counts, arithmetic, findings, notes."""
    r, launch = result.report, result.launch
    kind = "NeoX YAML" if r.flavor == "neox" else "DeepSpeed JSON"
    rows: list[tuple[str, str]] = [
        ("config", f"{', '.join(result.config.paths)} ({kind})"),
        ("semantics", f"deepspeed {launch.deepspeed_version}"),
        ("launcher", launch.basis),
        ("hosts", f"{launch.describe_hosts()} (backend {launch.backend})"),
        ("world", f"{r.world_size} process{'es' if r.world_size != 1 else ''}"),
    ]
    if result.neox is not None:
        rows.append(("NeoX count", f"{result.neox.count} GPUs {result.neox.basis}"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += [f"{'':<{width}}  {a}" if i else f"{'batch':<{width}}  {a}" for i, a in enumerate(r.arithmetic)]
    verdict = (
        "consistent" if r.consistent else f"INCONSISTENT ({len(r.findings)} finding{'s' * (len(r.findings) != 1)})"
    )
    lines.append(f"{'result':<{width}}  {verdict}")
    lines += [f"  - {f}" for f in r.findings]
    if result.fix is not None:
        lines.append(f"{'fix':<{width}}  {result.fix.summary()}")
    elif result.fix_error:
        lines.append(f"{'fix':<{width}}  impossible: {result.fix_error}")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def _inconsistent_message(result: Any, args: argparse.Namespace) -> str:
    findings = "; ".join(result.report.findings)
    if result.fix is None:
        return (
            f"batch inconsistent with the launcher's world: {findings}; "
            f"no fix keeps train_batch_size: {result.fix_error}"
        )
    out = suggested_fix_path(result.config.paths[0])
    command = shlex.join(["neox-epoch", "check-batch", *args.configs, *_flag_words(args), "--fix", out])
    return (
        f"batch inconsistent with the launcher's world: {findings}; fix: {result.fix.summary()}, "
        f"or write it with: {command}"
    )


def run(args: argparse.Namespace) -> int:
    """Run check-batch; see the module docstring for exit codes."""
    from neox_epoch.batch.fix import plan_fix, write_fixed_config
    from neox_epoch.batch.preflight import preflight
    from neox_epoch.batch.world import neox_hostfile_path

    overrides = _overrides(args)
    if args.fix is not None:  # refused before DeepSpeed is imported; checked again with every file read
        from neox_epoch.util.config_out import config_inputs, config_output
        from neox_epoch.util.output import check_output

        check_output(
            config_output(args.fix, "--fix", ".fixed"),
            config_inputs(args.configs, [(args.hostfile or "", "the hostfile")]),
        )
    result = preflight(args.configs, overrides)
    if args.json:
        print(json.dumps(result.to_json(), indent=2, sort_keys=False))
    else:
        print(format_table(result))
    if args.fix is None:
        if not result.consistent:
            raise BatchError(_inconsistent_message(result, args))
        return 0
    if result.fix is None and result.fix_error is not None:
        raise BatchError(f"--fix cannot keep train_batch_size: {result.fix_error}")
    fix = result.fix if result.fix is not None else plan_fix(result.config, result.report)
    read = [
        (path, "the hostfile")
        for path in (result.launch.hostfile, result.settings.hostfile, neox_hostfile_path(result.settings))
        if path
    ]
    write_fixed_config(result.config, fix, args.fix, overrides if result.config.flavor == "neox" else None, read)
    recheck = preflight([args.fix], overrides)
    if not recheck.consistent:  # a bug, not bad input: say so plainly
        raise BatchError(
            f"the fixed config {args.fix} is still inconsistent: {'; '.join(recheck.report.findings)}; "
            "please report this"
        )
    b = recheck.report.batch
    message = (
        f"wrote {args.fix}: {fix.summary()}; re-checked: consistent, "
        f"train_batch_size = {b.train_micro_batch_size_per_gpu} * {b.gradient_accumulation_steps} * "
        f"{recheck.report.data_parallel_size} = {b.train_batch_size}"
    )
    if not args.json:
        print(message)
    else:
        import sys

        print(message, file=sys.stderr)
    return 0 if result.consistent else 1
