"""``neox-epoch launch``: a drop-in for ``deepy.py`` that applies the ``neox_epoch`` block.

Usage, from the NeoX checkout, with deepy.py's own arguments::

    neox-epoch launch train.py configs/125M.yml configs/local_setup.yml

What happens, in order (NeoX's own ``deepy.main`` runs; only two names are wrapped, in memory):

1. deepy parses its command line as always; when it calls ``NeoXArgs.from_ymls(paths, overwrite)``
   the wrapper reads the files, removes the ``neox_epoch`` block (text-level cut, comments kept; the
   user's files are never modified: cleaned copies with the same basenames go to a private temp dir,
   written atomically), validates the block (unknown key -> did-you-mean),
2. runs the batch/world check (``neox_epoch.batch.preflight``) on the cleaned configs, and stops with
   its findings when the batch disagrees with the world the launcher starts,
3. plans the run (``neox_epoch.neox.planning``) and passes ``train_iters`` (and ``train_epochs: null``)
   and the schedule keys that follow it (``neox_epoch.plan.schedule``: e.g. an ``lr_decay_iters`` that equalled
   the old train_iters) to NeoX as overwrite values, so ``--megatron_config`` carries them to every
   worker; every change is printed on stderr as ``neox_epoch: key old -> new (action): why``,
4. puts the block and the planned settings in ``$NEOX_EPOCH_BLOCK`` and appends its prefix to
   ``deepspeed.launcher.runner.EXPORT_ENVS`` (as deepy does for WANDB_API_KEY), so pdsh/MPI multi-node
   launches export it too,
5. rewrites the launcher argv to run ``python -m neox_epoch.neox.worker train.py ...`` (the launcher's
   ``--module``), which installs the hooks and then runs train.py unchanged, and calls
   ``deepspeed.launcher.runner.main(argv)``.

``--dry-run`` stops before step 5's launch and prints the argv, the environment value and the worker
config as one JSON line (the last line of stdout). :func:`hook_deepy` does steps 1-4 for a patched deepy.py
(patches/neox_epoch_hook.patch).
"""

from __future__ import annotations

import argparse
import atexit
import base64
import dataclasses
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING, Any

import yaml

from neox_epoch.errors import BatchError, ConfigError, NeoxEpochError
from neox_epoch.formats.neox_config import BLOCK, load_neox_configs
from neox_epoch.neox.block import ENV_VAR, EXPORT_PREFIX, HookBlock, parse_block
from neox_epoch.util.helptext import examples
from neox_epoch.util.output import Output, write_output_text
from neox_epoch.util.schema import stamp
from neox_epoch.util.textfile import read_config_text

if TYPE_CHECKING:
    from neox_epoch.neox.planning import RunPlan

#: the module the workers run (``python -m``) instead of the user script
WORKER_MODULE = "neox_epoch.neox.worker"
_BLOCK_KEYS = (BLOCK, BLOCK.replace("_", "-"))


class LaunchError(NeoxEpochError):
    """The deepspeed launcher (not neox-epoch) refused the run: its message, on one line."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "launch",
        help="drop-in for NeoX's deepy.py that applies the neox_epoch block (exact epochs, live counters)",
        description="Run from the GPT-NeoX checkout with deepy.py's arguments: neox-epoch launch train.py "
        "config.yml ... . Removes the neox_epoch block before NeoX parses the configs, checks the "
        "batch against the world, sets train_iters, and launches workers that install the hooks.",
        **examples(
            "neox-epoch launch train.py configs/125M.yml configs/local_setup.yml   # in the GPT-NeoX checkout",
            "neox-epoch launch --dry-run train.py configs/125M.yml exact.yml         # print what it would run",
        ),
    )
    p.add_argument("--neox-dir", default=".", help="the GPT-NeoX checkout (default: the current directory)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="instead of launching, print the launcher argv, worker "
        "environment and worker config as one JSON line (the last line of stdout; NeoX prints its args before)",
    )
    p.add_argument(
        "deepy_args",
        nargs=argparse.REMAINDER,
        metavar="train.py CONFIG.yml ...",
        help="deepy.py's arguments, unchanged",
    )
    p.set_defaults(func=run)


# ----------------------------------------------------------------------------------------------------------
# config cleaning


def strip_block_text(text: str, path: str) -> tuple[str, Any]:
    """Remove the top-level ``neox_epoch`` key and its value from YAML ``text``; return (text, block).

    The cut is made at the YAML node marks, so comments and layout elsewhere stay as written (NeoX saves
    the config texts with its checkpoints). The result is re-parsed and must equal the original minus the
    key; if the text cut cannot be made safely the mapping is dumped instead.
    """
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(data, dict):
        return text, None
    keys = [k for k in data if str(k).replace("-", "_") == BLOCK]
    if not keys:
        return text, None
    if len(keys) > 1:
        raise ConfigError(f"{path}: {BLOCK}: given {len(keys)} times ({keys}); keep one")
    raw = data[keys[0]]
    want = {k: v for k, v in data.items() if k != keys[0]}
    for knode, vnode in getattr(root, "value", []):
        if getattr(knode, "value", None) != keys[0]:
            continue
        start, end = knode.start_mark.index, vnode.end_mark.index
        rest = text[end:]
        stripped = rest.lstrip(" \t")
        if stripped.startswith(","):
            end += len(rest) - len(stripped) + 1
        out = text[:start] + text[end:]
        try:
            if yaml.safe_load(out) == want:
                return out, raw
        except yaml.YAMLError:
            pass
    return yaml.safe_dump(want, sort_keys=False), raw


def clean_configs(paths: list[str], workdir: str) -> tuple[list[str], HookBlock | None]:
    """Cleaned copies (same basenames) of ``paths`` in ``workdir`` and the block found in them."""
    found: list[tuple[str, Any]] = []
    out = []
    for path in paths:
        if not os.path.isfile(path):
            raise ConfigError(f"{path}: config file not found")
        text = read_config_text(path, "NeoX YAML config")
        cleaned, raw = strip_block_text(text, path)
        if raw is not None:
            found.append((path, raw))
            cleaned = f"# {BLOCK} block removed by neox-epoch launch (applied through its hooks)\n" + cleaned
        dst = os.path.join(workdir, os.path.basename(path))
        if os.path.exists(dst):
            raise ConfigError(f"{path}: two config files named {os.path.basename(path)}; NeoX requires unique names")
        write_output_text(
            Output(dst, "launch's cleaned config copy", example=os.path.basename(path)),
            cleaned,
            [(p, "the input config") for p in paths],
        )
        out.append(dst)
    if len(found) > 1:
        raise ConfigError(f"{BLOCK}: given in {[p for p, _ in found]}; keep it in one file")
    return out, (parse_block(found[0][1], found[0][0]) if found else None)


# ----------------------------------------------------------------------------------------------------------
# the deepy hooks


class LaunchState:
    """What the wrapped from_ymls decided (read by the launcher and by --dry-run)."""

    def __init__(self) -> None:
        self.workdir: str | None = None
        self.hook: HookBlock | None = None
        self.cleaned: list[str] = []
        self.env_value: str | None = None
        self.notes: list[str] = []
        self.schedule: list[dict[str, Any]] = []


STATE = LaunchState()


def _preflight_tbs(cleaned: list[str], overwrite: dict[str, Any]) -> int | None:
    from neox_epoch.batch.config import LauncherSettings
    from neox_epoch.batch.preflight import preflight

    hostfile = overwrite.get("hostfile")
    pf = preflight(cleaned, LauncherSettings(hostfile=hostfile) if hostfile else None)
    if not pf.consistent:
        fix = f"; fix: {pf.fix.settings()}" if pf.fix is not None else ""
        raise BatchError("batch/world check failed: " + " | ".join(pf.report.findings) + fix)
    STATE.notes.extend(pf.notes)
    return int(pf.report.batch.train_batch_size) if pf.report.batch.train_batch_size else None


def apply_block(paths: list[str], overwrite: dict[str, Any]) -> list[str]:
    """Steps 1-4: clean ``paths``, check, plan, set overwrite values and the worker environment."""
    from neox_epoch.neox.planning import make_run_plan

    if STATE.workdir is None:
        STATE.workdir = tempfile.mkdtemp(prefix="neox_epoch_launch_")
        atexit.register(shutil.rmtree, STATE.workdir, True)
    sub = tempfile.mkdtemp(dir=STATE.workdir)
    cleaned, hook = clean_configs(list(paths), sub)
    if hook is None:
        return list(paths)
    tbs = _preflight_tbs(cleaned, overwrite)
    cfg = load_neox_configs(cleaned, check_keys=False)
    values = dict(cfg.values)
    if tbs is not None:
        values["train_batch_size"] = tbs
    rp = make_run_plan(values, hook.block, hook.settings)
    overwrite.update(rp.overwrite())
    _report_changes(rp)
    block = hook.block
    if block.epochs is None and values.get("train_epochs"):
        # train_epochs is cleared for the workers (train_iters replaces it): hand its target on in the block
        block = dataclasses.replace(block, epochs=values["train_epochs"])
    hb = HookBlock(block, rp.settings())
    STATE.hook, STATE.cleaned, STATE.env_value = hb, cleaned, hb.to_env()
    os.environ[ENV_VAR] = STATE.env_value
    runner = importlib.import_module("deepspeed.launcher.runner")
    if EXPORT_PREFIX not in runner.EXPORT_ENVS:
        runner.EXPORT_ENVS.append(EXPORT_PREFIX)
    return cleaned


def _report_changes(rp: RunPlan) -> None:
    """Say what the launch changes (never train_iters silently) and the schedule's warnings, on stderr and in
    the --dry-run notes."""
    STATE.schedule = rp.schedule.to_json()
    lines = [f"neox_epoch: {line}" for line in rp.changes()]
    lines += [f"neox_epoch: warning: {w.text}" for w in rp.schedule.warnings]
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    STATE.notes.extend(lines)


def hook_deepy() -> None:
    """Wrap ``NeoXArgs.from_ymls`` so deepy parses cleaned configs with train_iters planned (steps 1-4)."""
    neox_arguments = importlib.import_module("megatron.neox_arguments")
    cls = neox_arguments.NeoXArgs
    if getattr(cls.from_ymls, "_neox_epoch", False):
        return
    real = cls.from_ymls

    def from_ymls(klass: Any, paths_to_yml_files: list[str], overwrite_values: dict[str, Any] | None = None) -> Any:
        overwrite = dict(overwrite_values or {})
        cleaned = apply_block(list(paths_to_yml_files), overwrite)
        return real.__func__(klass, cleaned, overwrite)

    from_ymls._neox_epoch = True  # type: ignore[attr-defined]
    cls.from_ymls = classmethod(from_ymls)


def worker_argv(argv: list[str], user_script: str) -> list[str]:
    """Launcher argv running ``python -m neox_epoch.neox.worker user_script ...`` instead of the script."""
    try:
        i = argv.index(user_script)
    except ValueError as err:
        raise ConfigError(f"launch: deepy's launcher argv has no user script {user_script!r}: {argv}") from err
    return ["--module", *argv[:i], WORKER_MODULE, *argv[i:]]


def decode_megatron_config(argv: list[str]) -> dict[str, Any]:
    """The worker config (``--megatron_config`` base64 JSON) in a launcher argv."""
    i = argv.index("--megatron_config")
    return dict(json.loads(base64.urlsafe_b64decode(argv[i + 1]).decode("utf-8")))


def _load_deepy(neox_dir: str) -> Any:
    path = os.path.join(neox_dir, "deepy.py")
    if not os.path.isfile(path):
        raise ConfigError(
            f"--neox-dir {neox_dir}: no deepy.py there; run from the GPT-NeoX checkout or pass --neox-dir"
        )
    if neox_dir not in sys.path:
        sys.path.insert(0, neox_dir)
    spec = importlib.util.spec_from_file_location("deepy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args: argparse.Namespace) -> int:
    deepy_args = [a for a in args.deepy_args if a != "--"]
    if not deepy_args:
        raise ConfigError("launch: no arguments; usage: neox-epoch launch train.py config.yml ...")
    neox_dir = os.path.abspath(args.neox_dir)
    deepy = _load_deepy(neox_dir)
    hook_deepy()
    runner: Any = importlib.import_module("deepspeed.launcher.runner")  # its main is replaced for one call
    real_main = runner.main
    captured: dict[str, Any] = {}

    def launcher_main(argv: list[str]) -> Any:
        if STATE.hook is None:
            raise ConfigError(
                f'launch: no {BLOCK} block in the configs; add e.g. "{BLOCK}": {{"epochs": 1}} or use deepy.py'
            )
        user_script = deepy_args[0]
        new = worker_argv(list(argv), user_script)
        captured["argv"] = new
        if args.dry_run:
            return 0
        try:
            return real_main(new)
        except (RuntimeError, ValueError, OSError) as err:  # DeepSpeed's own refusals (hostfile, ssh, resources)
            raise LaunchError(f"the deepspeed launcher refused the run: {err}") from err

    runner.main = launcher_main  # deepy.py calls deepspeed's runner.main: ours for this call
    try:
        rc = deepy.main(deepy_args)
    finally:
        runner.main = real_main
    if args.dry_run:
        argv = captured.get("argv", [])
        print(
            json.dumps(
                {
                    **stamp(),
                    "launcher_argv": argv,
                    "env": {ENV_VAR: STATE.env_value},
                    "export_prefix": EXPORT_PREFIX,
                    "block": STATE.hook.block.to_mapping() if STATE.hook else None,
                    "settings": STATE.hook.settings if STATE.hook else None,
                    "megatron_config": decode_megatron_config(argv) if argv else None,
                    "notes": STATE.notes,
                    "schedule": STATE.schedule,
                },
                default=str,
            ),
            flush=True,
        )
    return int(rc or 0)
