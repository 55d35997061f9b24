"""Hostfiles as DeepSpeed's ``fetch_hostfile`` reads them (without DeepSpeed), the one NeoX reads, and how hosts
and pools are described in messages."""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Mapping, Sequence

from neox_epoch.batch.config import LauncherSettings
from neox_epoch.errors import ConfigError
from neox_epoch.util.inputs import CONFIG_BYTES, open_input

#: DeepSpeed's default hostfile (``deepspeed.launcher.runner.DLTS_HOSTFILE``): NeoX reads it when it exists
DEFAULT_HOSTFILE = "/job/hostfile"
#: a hostfile line as ``deepspeed.launcher.runner._parse_hostfile`` matches it (``node1 slots=8``)
_HOSTFILE_LINE = re.compile(r"^(\S+)\s+slots=(\d+)")


def hosts_text(hosts: Mapping[str, Sequence[int]]) -> str:
    parts = []
    for host, slots in hosts.items():
        slots = list(slots)
        if len(slots) > 4 and slots == list(range(slots[0], slots[0] + len(slots))):
            parts.append(f"{host}:{slots[0]}-{slots[-1]}")
        else:
            parts.append(f"{host}:{','.join(map(str, slots))}")
    return " ".join(parts) if parts else "(none)"


def pool_text(pool: Mapping[str, int]) -> str:
    counts = collections.Counter(pool.values())
    if len(counts) == 1:
        ((slots, hosts),) = counts.items()
        return f"{hosts} host{'s' if hosts != 1 else ''} x {slots} slots"
    return ", ".join(f"{h} slots={n}" for h, n in pool.items())


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
        raise hostfile_refused(path, reason)
    if not pool:
        raise hostfile_refused(path, "Hostfile is empty or not formatted correctly, unable to proceed with launching.")
    return pool


def hostfile_refused(path: str, reason: str) -> ConfigError:
    return ConfigError(f'hostfile "{path}" is refused by NeoX (DeepSpeed\'s fetch_hostfile): {reason}; fix the file')


def neox_hostfile_path(settings: LauncherSettings, environ: Mapping[str, str] | None = None) -> str | None:
    """The hostfile NeoX's ``calculate_derived`` reads: the config's, else ``$DLTS_HOSTFILE`` (default
    /job/hostfile) when that path exists, else None (NeoX then counts ``torch.cuda.device_count()``)."""
    env = os.environ if environ is None else environ
    if settings.hostfile:
        return settings.hostfile
    dlts = env.get("DLTS_HOSTFILE", DEFAULT_HOSTFILE)
    return dlts if os.path.exists(dlts) else None
