"""The world the deepspeed launcher will start, computed with DeepSpeed's own runner functions.

:func:`launcher_world` follows the order of ``deepspeed.launcher.runner.main`` and calls its functions
(``parse_args``, ``fetch_hostfile``, ``parse_inclusion_exclusion``, ``apply_num_nodes_and_gpus`` where
the installed DeepSpeed has it, the backends' own validation) without starting any process, ssh
check or autotuning. Only the few lines ``main()`` keeps inline (the VISIBLE_DEVICES rule, the
include/exclude vs num_nodes/num_gpus conflict, the localhost pool) are mirrored here.

:func:`neox_gpu_count` is the count NeoX's ``calculate_derived`` uses for its own batch arithmetic:
the hostfile's resource pool when there is a hostfile, else ``torch.cuda.device_count()`` — which
ignores ``num_gpus``/``include``/``exclude`` and is the usual reason the two disagree.

DeepSpeed (and with it torch) is imported inside the functions, never at module import, and
:func:`neox_gpu_count` does without it for a hostfile alone (no include/exclude): :func:`read_hostfile`
reads the file by DeepSpeed's ``fetch_hostfile`` rules, so ``neox-epoch plan`` answers in well under a
second (tests compare both paths).
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import importlib
import json
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from neox_epoch.batch.config import LauncherSettings
from neox_epoch.errors import ConfigError, MissingPackageError
from neox_epoch.util.inputs import CONFIG_BYTES, open_input

#: stands in for the user script in the argv handed to DeepSpeed's parse_args (never run)
PLACEHOLDER_SCRIPT = "train.py"

#: DeepSpeed's default hostfile (``deepspeed.launcher.runner.DLTS_HOSTFILE``): NeoX reads it when it exists
DEFAULT_HOSTFILE = "/job/hostfile"
#: a hostfile line as ``deepspeed.launcher.runner._parse_hostfile`` matches it (``node1 slots=8``)
_HOSTFILE_LINE = re.compile(r"^(\S+)\s+slots=(\d+)")

#: backends whose world is the whole hostfile (mpirun -n sum(slots)), not the filtered resources
MPI_STYLE_LAUNCHERS = ("openmpi", "mpich", "impi", "mvapich")
#: MPI-style backends that also need the same slot count on every host (checked in their get_cmd)
SAME_SLOTS_LAUNCHERS = {"mpich": "MPICH", "impi": "Intel MPI", "mvapich": "mvapich"}


def import_deepspeed(name: str = "deepspeed") -> ModuleType:
    """Import a DeepSpeed module without its import-time chatter.

    DeepSpeed's logger binds ``sys.stdout`` when it is created (``--json`` prints there), so the first
    import runs with stdout sent to stderr, and records below ERROR (the accelerator detection
    warning) are dropped while importing.
    """
    ds_logger = logging.getLogger("DeepSpeed")

    def errors_only(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR

    ds_logger.addFilter(errors_only)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name not in ("deepspeed", "torch"):
            raise
        raise MissingPackageError(
            f"{err.name} is not installed for {sys.executable}: this asks DeepSpeed's own launcher and config code "
            "(which imports torch); install them (pip install torch==2.13.0 deepspeed, or neox-epoch's [deepspeed] "
            "extra) or run it where your training runs"
        ) from None
    finally:
        ds_logger.removeFilter(errors_only)


@contextlib.contextmanager
def _quiet_deepspeed() -> Iterator[None]:
    """Keep DeepSpeed's logger below CRITICAL while we call its functions (we report in our words)."""
    logger = import_deepspeed("deepspeed.utils").logger
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def deepspeed_runner() -> ModuleType:
    """``deepspeed.launcher.runner`` (imports torch)."""
    return import_deepspeed("deepspeed.launcher.runner")


def deepspeed_version() -> str:
    """The installed DeepSpeed's version string."""
    return str(import_deepspeed("deepspeed").__version__)


def _describe_hosts(hosts: Mapping[str, Sequence[int]]) -> str:
    parts = []
    for host, slots in hosts.items():
        slots = list(slots)
        if len(slots) > 4 and slots == list(range(slots[0], slots[0] + len(slots))):
            parts.append(f"{host}:{slots[0]}-{slots[-1]}")
        else:
            parts.append(f"{host}:{','.join(map(str, slots))}")
    return " ".join(parts) if parts else "(none)"


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
        return _describe_hosts(self.hosts)


@dataclass(frozen=True, kw_only=True)
class NeoxCount:
    """The GPU count NeoX's ``calculate_derived`` assumes (``global_num_gpus``)."""

    count: int
    """NeoX's ``global_num_gpus``."""
    basis: str
    """How NeoX arrived at it, phrased to follow "NeoX counted N GPUs"."""
    hosts: dict[str, list[int]] | None = None
    """NeoX's resource pool after include/exclude/num_nodes, when a hostfile was used."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Extra remarks (e.g. NeoX would fail here)."""


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


def _pool_text(pool: Mapping[str, int]) -> str:
    counts = collections.Counter(pool.values())
    if len(counts) == 1:
        ((slots, hosts),) = counts.items()
        return f"{hosts} host{'s' if hosts != 1 else ''} x {slots} slots"
    return ", ".join(f"{h} slots={n}" for h, n in pool.items())


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
    with _quiet_deepspeed():
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
        basis.insert(0, f"hostfile {args.hostfile} ({_pool_text(resource_pool)})")
    else:
        resource_pool, local = _local_pool(get_accelerator(), args, argv)
        basis.insert(0, local)
    active = _active_resources(runner, args, resource_pool, include, exclude, argv)
    filters = _filters(include, exclude, args.num_nodes, args.num_gpus)
    if filters:
        basis.append(f"{filters} keeps {_describe_hosts(active)}")
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


def _cuda_device_count() -> int:
    import torch

    return int(torch.cuda.device_count())


def read_hostfile(path: str) -> dict[str, int] | None:
    """The resource pool of hostfile ``path`` (host -> slots, in file order), read without DeepSpeed.

    Same rules and messages as DeepSpeed's ``fetch_hostfile``: None when ``path`` is not a file; blank
    lines and lines starting with ``#`` skipped; every other line must start with ``HOST slots=N``; a
    host given twice, a bad line or no host at all raise :class:`ConfigError` quoting DeepSpeed's words.
    """
    if not os.path.isfile(path):
        return None
    try:
        with open_input(path, "hostfile", CONFIG_BYTES, encoding="utf-8") as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f'hostfile "{path}" cannot be read ({err}); check the path') from None
    pool: dict[str, int] = collections.OrderedDict()
    for raw in lines:
        line = raw.strip()
        if line.startswith("#") or line == "":
            continue
        match = _HOSTFILE_LINE.search(line)
        if match is None:
            reason = f"Hostfile contains a bad entry: {line}, unable to proceed with launching"
        elif match.group(1) in pool:
            reason = f"Hostfile contains multiple entries for {match.group(1)}, unable to proceed with launching"
        else:
            pool[match.group(1)] = int(match.group(2))
            continue
        raise _hostfile_refused(path, reason)
    if not pool:
        raise _hostfile_refused(path, "Hostfile is empty or not formatted correctly, unable to proceed with launching.")
    return pool


def _hostfile_refused(path: str, reason: str) -> ConfigError:
    return ConfigError(f'hostfile "{path}" is refused by NeoX (DeepSpeed\'s fetch_hostfile): {reason}; fix the file')


def neox_hostfile_path(settings: LauncherSettings, environ: Mapping[str, str] | None = None) -> str | None:
    """The hostfile NeoX's ``calculate_derived`` reads: the config's, else ``$DLTS_HOSTFILE`` (default
    /job/hostfile) when that path exists, else None (NeoX then counts ``torch.cuda.device_count()``)."""
    env = os.environ if environ is None else environ
    if settings.hostfile:
        return settings.hostfile
    dlts = env.get("DLTS_HOSTFILE", DEFAULT_HOSTFILE)
    return dlts if os.path.exists(dlts) else None


def neox_gpu_count(
    settings: LauncherSettings,
    *,
    global_num_gpus: int | None = None,
    cuda_device_count: int | None = None,
    environ: Mapping[str, str] | None = None,
    use_deepspeed: bool = False,
) -> NeoxCount:
    """The ``global_num_gpus`` NeoX's ``calculate_derived`` would compute for ``settings``.

    With a hostfile (the config's, else ``$DLTS_HOSTFILE``/``/job/hostfile`` when it exists): the
    resource pool after include/exclude, truncated to ``num_nodes``; ``num_gpus * hosts`` when num_gpus
    is set, else the sum of slots. Without one: ``torch.cuda.device_count()`` (``cuda_device_count``
    overrides it, for tests), ignoring num_gpus/include/exclude.

    Without include/exclude the hostfile is read by :func:`read_hostfile` (no DeepSpeed; torch only for
    a missing hostfile, which means this machine's GPUs); ``use_deepspeed`` forces DeepSpeed's own
    ``fetch_hostfile`` / ``parse_inclusion_exclusion`` (which include/exclude always use).
    """
    if global_num_gpus is not None:
        return NeoxCount(count=global_num_gpus, basis="from global_num_gpus in the config")

    def cuda() -> int:
        return _cuda_device_count() if cuda_device_count is None else cuda_device_count

    path = neox_hostfile_path(settings, environ)
    if path is None:
        n = cuda()
        return NeoxCount(count=n, basis="with torch.cuda.device_count() because there is no hostfile")
    filtered = bool(settings.include or settings.exclude)
    if not use_deepspeed and not filtered:
        found_pool = _pool_or_local(read_hostfile(path), path, cuda)
        if isinstance(found_pool, NeoxCount):
            return found_pool
        pool, source = found_pool
        resources = collections.OrderedDict((h, list(range(n))) for h, n in pool.items())
    else:
        found = _deepspeed_resources(settings, path, cuda)
        if isinstance(found, NeoxCount):
            return found
        resources, source = found
    return _neox_count(settings, resources, source)


def _deepspeed_resources(
    settings: LauncherSettings, path: str, cuda: Any
) -> NeoxCount | tuple[collections.OrderedDict[str, list[int]], str]:
    """NeoX's ``obtain_resource_pool`` with DeepSpeed's functions: the filtered pool and its description,
    or the final count when the hostfile is missing and this machine has no GPU."""
    runner = deepspeed_runner()
    with _quiet_deepspeed():
        try:
            pool = runner.fetch_hostfile(path)
        except ValueError as err:
            raise _hostfile_refused(path, str(err)) from None
        found_pool = _pool_or_local(pool, path, cuda)
        if isinstance(found_pool, NeoxCount):
            return found_pool
        pool, source = found_pool
        try:
            resources = runner.parse_inclusion_exclusion(pool, settings.include or "", settings.exclude or "")
        except ValueError as err:
            raise ConfigError(
                f"NeoX cannot apply include/exclude to hostfile {path}: {err}; fix include/exclude"
            ) from None
    return collections.OrderedDict((h, list(s)) for h, s in resources.items()), source


def _pool_or_local(pool: Mapping[str, int] | None, path: str, cuda: Any) -> NeoxCount | tuple[dict[str, int], str]:
    """NeoX's ``obtain_resource_pool``: the hostfile's pool and its description, or, when the hostfile does not
    exist, this machine's GPUs as localhost (the final count when there are none)."""
    if pool:
        return dict(pool), f"from hostfile {path} ({_pool_text(pool)})"
    n = cuda()
    if n == 0:
        return _no_gpu(path)
    return {"localhost": n}, f"with torch.cuda.device_count() = {n} because hostfile {path} does not exist"


def _no_gpu(path: str) -> NeoxCount:
    return NeoxCount(
        count=0,
        basis=f"with torch.cuda.device_count() = 0 because hostfile {path} does not exist "
        "(NeoX stops: 'Unable to proceed, no GPU resources available')",
    )


def _neox_count(
    settings: LauncherSettings, resources: collections.OrderedDict[str, list[int]], source: str
) -> NeoxCount:
    """The last steps of NeoX's count: num_nodes keeps the first hosts, num_gpus multiplies the hosts left."""
    steps = [source]
    if settings.include or settings.exclude:
        steps.append(f"include/exclude keeps {_describe_hosts(resources)}")
    if settings.num_nodes is not None and settings.num_nodes > 0:
        resources = collections.OrderedDict(list(resources.items())[: settings.num_nodes])
        steps.append(f"num_nodes {settings.num_nodes} keeps {len(resources)} host{'s' if len(resources) != 1 else ''}")
    if settings.num_gpus is not None and settings.num_gpus > 0:
        count = settings.num_gpus * len(resources)
        why = (
            " (NeoX multiplies num_gpus by the hosts left, even when include/exclude chose fewer slots)"
            if settings.include or settings.exclude
            else ""
        )
        steps.append(f"num_gpus {settings.num_gpus} x {len(resources)} host{'s' if len(resources) != 1 else ''}{why}")
    else:
        count = sum(len(s) for s in resources.values())
    return NeoxCount(count=count, basis=", ".join(steps), hosts=dict(resources))


def explain_disagreement(launch: LauncherWorld, neox: NeoxCount, launcher_notes: Sequence[str] = ()) -> str:
    """One sentence: what NeoX counted and why, versus what the launcher starts and why.

    ``launcher_notes`` are deepy's rewrites of the flags (dropped --num_gpus, $DLTS_HOSTFILE), which
    are often the reason.
    """
    why = "; ".join([*launcher_notes, launch.basis])
    return f"NeoX counted {neox.count} GPUs {neox.basis}, while the launcher starts {launch.world_size} ({why})"
