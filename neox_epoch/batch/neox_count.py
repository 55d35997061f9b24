"""The GPU count NeoX's ``calculate_derived`` uses for its own batch arithmetic: the hostfile's resource pool when
there is a hostfile, else ``torch.cuda.device_count()`` (which ignores ``num_gpus``/``include``/``exclude`` and
is the usual reason it and the launcher's world disagree).

DeepSpeed (and with it torch) is imported inside the functions, never at module import, and
:func:`neox_gpu_count` does without it for a hostfile alone (no include/exclude):
:func:`~neox_epoch.batch.hostfile.read_hostfile` reads the file by DeepSpeed's ``fetch_hostfile`` rules, so
``neox-epoch plan`` answers in well under a second (tests compare both paths).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from neox_epoch.batch.config import LauncherSettings
from neox_epoch.batch.deepspeed_import import deepspeed_runner, quiet_deepspeed
from neox_epoch.batch.hostfile import hostfile_refused, hosts_text, neox_hostfile_path, pool_text, read_hostfile
from neox_epoch.errors import ConfigError


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


def _cuda_device_count() -> int:
    import torch

    return int(torch.cuda.device_count())


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
    with quiet_deepspeed():
        try:
            pool = runner.fetch_hostfile(path)
        except ValueError as err:
            raise hostfile_refused(path, str(err)) from None
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
        return dict(pool), f"from hostfile {path} ({pool_text(pool)})"
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
        steps.append(f"include/exclude keeps {hosts_text(resources)}")
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
