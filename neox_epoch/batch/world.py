"""The world the deepspeed launcher will start, computed with DeepSpeed's own runner functions.

:func:`launcher_world` follows the order of ``deepspeed.launcher.runner.main`` and calls its functions
(``parse_args``, ``fetch_hostfile``, ``parse_inclusion_exclusion``, ``apply_num_nodes_and_gpus`` where
the installed DeepSpeed has it, the backends' own validation) without starting any process, ssh
check or autotuning. Only the few lines ``main()`` keeps inline (the VISIBLE_DEVICES rule, the
include/exclude vs num_nodes/num_gpus conflict, the localhost pool) are mirrored here.

NeoX's own count (``global_num_gpus``) is :func:`neox_epoch.batch.neox_count.neox_gpu_count`;
:func:`explain_disagreement` puts the two side by side. DeepSpeed (and with it torch) is imported inside the
functions, never at module import (:mod:`neox_epoch.batch.deepspeed_import`).
"""

from __future__ import annotations

import argparse
import base64
import collections
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from neox_epoch.batch.config import LauncherSettings
from neox_epoch.batch.deepspeed_import import deepspeed_runner, deepspeed_version, import_deepspeed, quiet_deepspeed
from neox_epoch.batch.hostfile import hosts_text, pool_text
from neox_epoch.batch.neox_count import NeoxCount
from neox_epoch.errors import ConfigError

#: stands in for the user script in the argv handed to DeepSpeed's parse_args (never run)
PLACEHOLDER_SCRIPT = "train.py"

#: backends whose world is the whole hostfile (mpirun -n sum(slots)), not the filtered resources
MPI_STYLE_LAUNCHERS = ("openmpi", "mpich", "impi", "mvapich")
#: MPI-style backends that also need the same slot count on every host (checked in their get_cmd)
SAME_SLOTS_LAUNCHERS = {"mpich": "MPICH", "impi": "Intel MPI", "mvapich": "mvapich"}


@dataclass(frozen=True, kw_only=True)
class LauncherWorld:
    """What ``deepspeed <flags> train.py`` would start."""

    world_size: int
    """Number of processes (ranks) the launcher starts: WORLD_SIZE in every worker."""
    hosts: dict[str, list[int]]
    """Host -> the device slots used on it, in rank order (what ``--world_info`` carries)."""
    backend: str
    """``local`` (``deepspeed.launcher.launch`` on this machine) or the multi-node backend (pdsh, ...)."""
    hostfile: str | None
    """The hostfile that was read, or None when there was none (localhost with device_count())."""
    argv: tuple[str, ...]
    """The launcher flags the world was computed from (as given to ``runner.parse_args``)."""
    basis: str
    """How the world came about, in words, for messages."""
    notes: tuple[str, ...] = ()
    """Things worth knowing that do not change the world (ignored env vars, missing backend, ...)."""
    deepspeed_version: str = ""
    """Version of the DeepSpeed whose runner functions were called."""

    def describe_hosts(self) -> str:
        """``node1:0-7 node2:0,1`` style summary of :attr:`hosts`."""
        return hosts_text(self.hosts)


def settings_argv(settings: LauncherSettings) -> list[str]:
    """DeepSpeed launcher flags for ``settings`` (only the ones given)."""
    argv: list[str] = []
    if settings.hostfile is not None:
        argv += ["--hostfile", settings.hostfile]
    if settings.include is not None:
        argv += ["--include", settings.include]
    if settings.exclude is not None:
        argv += ["--exclude", settings.exclude]
    if settings.num_nodes is not None:
        argv += ["--num_nodes", str(settings.num_nodes)]
    if settings.num_gpus is not None:
        argv += ["--num_gpus", str(settings.num_gpus)]
    if settings.master_port is not None:
        argv += ["--master_port", str(settings.master_port)]
    if settings.master_addr is not None:
        argv += ["--master_addr", settings.master_addr]
    if settings.launcher is not None:
        argv += ["--launcher", settings.launcher]
    if settings.force_multi:
        argv.append("--force_multi")
    if settings.no_ssh_check:
        argv.append("--no_ssh_check")
    return argv


def deepy_argv(settings: LauncherSettings, environ: Mapping[str, str] | None = None) -> tuple[list[str], list[str]]:
    """The launcher flags NeoX's ``deepy.py`` builds from its config, and notes on what it changed.

    deepy passes runner keys that differ from NeoX's defaults, then appends ``--hostfile $DLTS_HOSTFILE``
    and ``--master_addr $MASTER_ADDR`` when those are set (the later flag wins in argparse), and drops
    ``--num_gpus`` when ``--include``/``--exclude`` is present.
    """
    env = os.environ if environ is None else environ
    argv = settings_argv(settings)
    notes: list[str] = []
    if "DLTS_HOSTFILE" in env:
        argv += ["--hostfile", env["DLTS_HOSTFILE"]]
        if settings.hostfile is not None and settings.hostfile != env["DLTS_HOSTFILE"]:
            notes.append(
                f"deepy passes --hostfile $DLTS_HOSTFILE={env['DLTS_HOSTFILE']} after the config's hostfile "
                f"{settings.hostfile}, so the launcher reads $DLTS_HOSTFILE"
            )
    if "MASTER_ADDR" in env:
        argv += ["--master_addr", env["MASTER_ADDR"]]
    if (settings.include is not None or settings.exclude is not None) and settings.num_gpus is not None:
        i = argv.index("--num_gpus")
        del argv[i : i + 2]
        which = "include" if settings.include is not None else "exclude"
        notes.append(f"deepy drops --num_gpus {settings.num_gpus} because {which} is set")
    return argv, notes


def _filters(include: str, exclude: str, num_nodes: int, num_gpus: int) -> str:
    parts = []
    if include:
        parts.append(f"--include {include}")
    if exclude:
        parts.append(f"--exclude {exclude}")
    if num_nodes > 0:
        parts.append(f"--num_nodes {num_nodes}")
    if num_gpus > 0:
        parts.append(f"--num_gpus {num_gpus}")
    return " ".join(parts)


def _refused(err: BaseException, argv: Sequence[str]) -> ConfigError:
    flags = " ".join(argv) or "(no flags)"
    reason = str(err).strip().rstrip(".")
    return ConfigError(f"the deepspeed launcher refuses the flags {flags}: {reason}; change the launcher flags")


def launcher_world(argv: Sequence[str], *, environ: Mapping[str, str] | None = None) -> LauncherWorld:
    """Compute what ``deepspeed <argv> train.py`` would start, with DeepSpeed's runner functions.

    ``environ`` (default ``os.environ``) supplies the VISIBLE_DEVICES variable the runner honors;
    it is read, never modified. A launcher refusal (bad hostfile, unknown host or slot, conflicting
    flags, a backend that cannot express the filter) raises :class:`ConfigError` with DeepSpeed's words.
    """
    env = os.environ if environ is None else environ
    runner = deepspeed_runner()
    with quiet_deepspeed():
        return _launcher_world(runner, list(argv), env)


def _launcher_world(runner: ModuleType, argv: list[str], env: Mapping[str, str]) -> LauncherWorld:
    """``runner.main``'s steps up to starting any process: the world ``argv`` gives, with its basis and notes."""
    get_accelerator = import_deepspeed("deepspeed.accelerator").get_accelerator
    args, resource_pool = _args_and_pool(runner, argv)
    hostfile = args.hostfile if resource_pool else None
    visible_env = get_accelerator().visible_devices_envs()[0]
    include, notes, basis = _visible_devices(args, bool(resource_pool), visible_env, env.get(visible_env, ""))
    exclude = args.exclude
    if (args.num_nodes >= 0 or args.num_gpus >= 0) and (include != "" or exclude != ""):
        raise _refused(ValueError("Cannot specify num_nodes/gpus with include/exclude"), argv)
    if resource_pool:
        basis.insert(0, f"hostfile {args.hostfile} ({pool_text(resource_pool)})")
    else:
        resource_pool, local = _local_pool(get_accelerator(), args, argv)
        basis.insert(0, local)
    active = _active_resources(runner, args, resource_pool, include, exclude, argv)
    filters = _filters(include, exclude, args.num_nodes, args.num_gpus)
    if filters:
        basis.append(f"{filters} keeps {hosts_text(active)}")
    if hostfile is not None and not args.no_ssh_check and not args.no_ssh:
        notes.append(
            f"with a hostfile the launcher first checks passwordless ssh to {next(iter(active))}"
            + ("" if args.master_addr else " and asks it for its address (no --master_addr)")
        )
    hosts: dict[str, list[int]] = dict(active)
    backend = "local"
    if (args.force_multi or len(active) > 1) and not args.no_ssh:
        backend = args.launcher.lower()
        notes += _backend_notes(runner, args, backend, active, resource_pool, argv)
        hosts, line = _backend_hosts(backend, active, resource_pool, argv)
        basis.append(line)
    return LauncherWorld(
        world_size=sum(len(slots) for slots in hosts.values()),
        hosts=hosts,
        backend=backend,
        hostfile=hostfile,
        argv=tuple(argv),
        basis="; ".join(basis),
        notes=tuple(notes),
        deepspeed_version=deepspeed_version(),
    )


def _args_and_pool(runner: ModuleType, argv: list[str]) -> tuple[argparse.Namespace, dict[str, int] | None]:
    """The runner's parsed ``argv`` and its ``fetch_hostfile`` pool (None without a hostfile), refusals reworded."""
    try:
        args = runner.parse_args([*argv, PLACEHOLDER_SCRIPT])
    except SystemExit:
        raise ConfigError(f"the deepspeed launcher cannot parse the flags {' '.join(argv)}; check them") from None
    try:
        return args, runner.fetch_hostfile(args.hostfile)
    except ValueError as err:
        raise ConfigError(
            f'hostfile "{args.hostfile}" is refused by the deepspeed launcher: {err}; fix the file'
        ) from None
    except OSError as err:
        raise ConfigError(f'hostfile "{args.hostfile}" cannot be read ({err.strerror}); check the path') from None


def _visible_devices(
    args: argparse.Namespace, has_pool: bool, visible_env: str, visible: str
) -> tuple[str, list[str], list[str]]:
    """runner.main's VISIBLE_DEVICES rule: the include it leaves, with the notes and basis lines it adds."""
    if has_pool or not len(visible):
        return args.include, [], []
    if len(args.include) or len(args.exclude) or args.num_nodes > 1 or args.num_gpus > 0:
        note = f"{visible_env}={visible} is ignored by the launcher because launcher flags are given"
        return args.include, [note], []
    include = f"localhost:{visible}"
    return include, [], [f"{visible_env}={visible} becomes --include {include}"]


def _local_pool(accelerator: Any, args: argparse.Namespace, argv: list[str]) -> tuple[dict[str, int], str]:
    """runner.main without a hostfile: localhost with the accelerator's devices, and the basis line saying so."""
    device_count = accelerator.device_count()
    if device_count == 0:
        raise _refused(RuntimeError("Unable to proceed, no GPU resources available"), argv)
    if args.num_nodes > 1:
        raise _refused(ValueError("Num nodes is >1 but no extra nodes available via hostfile"), argv)
    return {"localhost": device_count}, (
        f"no hostfile ({args.hostfile} not found): localhost with {device_count} {accelerator.device_name()} device"
        f"{'s' if device_count != 1 else ''} (accelerator device_count())"
    )


def _active_resources(
    runner: ModuleType, args: argparse.Namespace, pool: Mapping[str, int], include: str, exclude: str, argv: list[str]
) -> collections.OrderedDict[str, list[int]]:
    """The hosts and slots left after include/exclude and num_nodes/num_gpus, as the backend validates them."""
    try:
        active = runner.parse_inclusion_exclusion(pool, include, exclude)
        if hasattr(runner, "apply_num_nodes_and_gpus"):  # DeepSpeed >= 0.19
            active = runner.apply_num_nodes_and_gpus(active, args.num_nodes, args.num_gpus)
        else:  # 0.14-0.18 keep the same two steps inline in main()
            active = _apply_num_nodes_and_gpus(active, args.num_nodes, args.num_gpus)
        launcher_classes = getattr(runner, "LAUNCHER_CLASSES", {})
        launcher_cls = launcher_classes.get(args.launcher.lower())
        if launcher_cls is not None and hasattr(launcher_cls, "validate_active_resources"):
            launcher_cls.validate_active_resources(active)
    except ValueError as err:
        raise _refused(err, argv) from None
    active = collections.OrderedDict((h, list(s)) for h, s in active.items())
    if not active or not any(active.values()):
        raise _refused(ValueError("the include/exclude filter leaves no slots to run on"), argv)
    return active


def _backend_notes(
    runner: ModuleType,
    args: argparse.Namespace,
    backend: str,
    active: Mapping[str, list[int]],
    pool: Mapping[str, int],
    argv: list[str],
) -> list[str]:
    """Build the multi-node backend as runner.main does (its refusals reworded); a note if it is not installed."""
    cls = _backend_class(runner, backend)
    if cls is None:
        raise _refused(NotImplementedError(f"Unknown launcher {args.launcher}"), argv)
    world_info = base64.urlsafe_b64encode(json.dumps(active).encode("utf-8")).decode("utf-8")
    try:
        backend_runner = cls(args, world_info) if backend == "pdsh" else cls(args, world_info, pool)
    except ValueError as err:  # validate_args: MPI-style backends reject include/exclude/num_*
        raise _refused(err, argv) from None
    with warnings.catch_warnings():  # mvapich warns when mpiname is missing
        warnings.simplefilter("ignore")
        exists = backend_runner.backend_exists()
    return [] if exists else [f"launcher backend '{backend}' is not installed on this machine"]


def _backend_hosts(
    backend: str, active: Mapping[str, list[int]], pool: Mapping[str, int], argv: list[str]
) -> tuple[dict[str, list[int]], str]:
    """The hosts and slots a multi-node backend starts ranks on, and the basis line saying why."""
    if backend not in MPI_STYLE_LAUNCHERS:
        return dict(active), f"--launcher {backend} on {len(active)} host{'s' if len(active) != 1 else ''}"
    counts = list(pool.values())
    if backend in SAME_SLOTS_LAUNCHERS and any(c != counts[0] for c in counts):
        raise _refused(ValueError(f"{SAME_SLOTS_LAUNCHERS[backend]} requires same number of devices per node"), argv)
    # mpirun -n sum(hostfile slots)
    return {h: list(range(n)) for h, n in pool.items()}, f"--launcher {backend} starts one rank per hostfile slot"


def _backend_class(runner: ModuleType, backend: str) -> type | None:
    classes: Mapping[str, Any] = getattr(runner, "LAUNCHER_CLASSES", None) or {
        "pdsh": runner.PDSHRunner,
        "openmpi": runner.OpenMPIRunner,
        "mpich": runner.MPICHRunner,
        "impi": getattr(runner, "IMPIRunner", None),
        "mvapich": runner.MVAPICHRunner,
        "slurm": runner.SlurmRunner,
    }
    return classes.get(backend)


def _apply_num_nodes_and_gpus(active: Mapping[str, list[int]], num_nodes: int, num_gpus: int) -> dict[str, list[int]]:
    """The two trimming steps of runner.main() in DeepSpeed 0.14-0.18 (a function since 0.19)."""
    out = collections.OrderedDict(active)
    if num_nodes > 0:
        out = collections.OrderedDict(list(out.items())[:num_nodes])
    if num_gpus > 0:
        out = collections.OrderedDict((h, list(range(num_gpus))) for h in out)
    return out


def explain_disagreement(launch: LauncherWorld, neox: NeoxCount, launcher_notes: Sequence[str] = ()) -> str:
    """One sentence: what NeoX counted and why, versus what the launcher starts and why.

    ``launcher_notes`` are deepy's rewrites of the flags (dropped --num_gpus, $DLTS_HOSTFILE), which
    are often the reason.
    """
    why = "; ".join([*launcher_notes, launch.basis])
    return f"NeoX counted {neox.count} GPUs {neox.basis}, while the launcher starts {launch.world_size} ({why})"
