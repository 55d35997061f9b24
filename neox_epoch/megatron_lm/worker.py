"""What each Megatron-LM rank runs under ``neox-epoch launch``:
``-m neox_epoch.megatron_lm.worker pretrain_gpt.py FLAGS``.

Reads ``$NEOX_EPOCH_MEGATRON_LM``, plans the script's flags with the planner ``neox-epoch plan`` uses (the
exact flags are already in them), puts the script's directory first on ``sys.path`` (as ``python
pretrain_gpt.py`` would), installs the hooks (:mod:`neox_epoch.megatron_lm.hooks`) and runs the script as
``__main__`` with ``sys.argv = [script, *FLAGS]``, as Megatron-LM expects. The plan is logged once (rank 0).
"""

from __future__ import annotations

import logging
import os
import runpy
import sys

from neox_epoch.errors import ConfigError, NeoxEpochError
from neox_epoch.megatron_lm.payload import ENV_VAR, Payload, from_environ
from neox_epoch.plan.model import Plan
from neox_epoch.util.loghandler import ensure_log_handler

log = logging.getLogger("neox_epoch.megatron_lm")


def plan_flags(flags: list[str], payload: Payload) -> Plan:
    """The plan of the script's flags (observe: as given; exact: with the exact flags appended)."""
    from neox_epoch.plan.from_megatron import megatron_argv, megatron_input
    from neox_epoch.plan.planner import make_plan

    argv = megatron_argv(flags)
    resume = payload.settings.get("resume")
    if resume:  # a resume with another batch: the split is built as the checkpoint's run built it
        gbs = resume.get("planned_global_batch_size")
        if gbs and int(resume["train_request"]) % int(gbs) == 0:
            argv += ["--global-batch-size", str(gbs), "--train-iters", str(int(resume["train_request"]) // int(gbs))]
        else:
            argv += ["--train-iters", str(payload.settings["train_iters"])]
    world = os.environ.get("WORLD_SIZE")
    if world and not any(t.partition("=")[0] == "--world-size" for t in argv):
        argv += ["--world-size", world]
    version = payload.version
    if not version:  # started without neox-epoch launch: mirror the megatron-core this process imports
        from neox_epoch.formats.detect import version_to_mirror

        version = version_to_mirror(None, False)
    mi = megatron_input(argv, version)
    plan = make_plan(mi.inp)
    return plan


def log_plan(plan: Plan, payload: Payload) -> None:
    from neox_epoch.formats.runlog import is_logging_rank
    from neox_epoch.plan.render import table

    if not is_logging_rank():
        return
    log.info("neox_epoch: %s run: %d iterations, %d train samples", payload.mode, plan.train_iters, plan.train_samples)
    for line in table(plan).splitlines():
        log.info("neox_epoch: %s", line)
    for text in payload.warnings or [w.text for w in plan.warnings]:
        log.info("neox_epoch: warning: %s", text)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        raise ConfigError("neox_epoch.megatron_lm.worker: expected the script first: pretrain_gpt.py FLAGS")
    script, flags = args[0], args[1:]
    payload = from_environ() or Payload()
    if os.environ.get(ENV_VAR) is None:
        log.debug("neox_epoch: %s not set: observing only", ENV_VAR)
    sys.argv = [script, *flags]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    ensure_log_handler()
    try:
        plan: Plan | None = plan_flags(flags, payload)
    except NeoxEpochError as err:
        if payload.mode == "exact":
            raise
        log.warning("neox_epoch: this line cannot be planned (%s); the run goes on without the hooks' counters", err)
        plan = None
    if plan is not None:
        log_plan(plan, payload)
    from neox_epoch.megatron_lm.hooks import install

    install(payload, plan)
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NeoxEpochError as err:
        print(f"neox_epoch: error: {err}", file=sys.stderr, flush=True)
        sys.exit(err.exit_code)
