"""The launcher in front of a pasted Megatron-LM command line (torchrun ...): where it ends, and the world size
it and the command line give.

Pure: stdlib only."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from neox_epoch.errors import ConfigError
from neox_epoch.formats import launch_line
from neox_epoch.formats.megatron_flags import option_specs
from neox_epoch.semantics import megatron_lm as megatron_lm_sem


def split_launcher(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(launcher tokens, Megatron-LM tokens). Everything up to the ``*.py`` script is the launcher's
    (``torchrun --nproc_per_node 8 pretrain_gpt.py ...``; a ``.py`` value of a Megatron-LM flag is not a script),
    except options given before the launcher and ``--world-size``: those count as if given after the script
    (one given again there with another value is refused). A Megatron-LM flag among torchrun's is refused."""
    line = launch_line.cut([str(t) for t in argv], option_specs(megatron_lm_sem.current().version))
    launch_line.check_given_twice(line.before, line.after, line.script)
    return line.launcher, line.before + line.after


def launcher_world(tokens: list[str]) -> dict[str, str]:
    """The launcher ("launcher": torchrun, python or another's name) and torchrun's --nproc-per-node ("nproc")
    and --nnodes ("nnodes"), as torchrun reads them (either spelling, ``=value``, unique prefixes)."""
    return launch_line.launcher_world(tokens)


def _positive_int(flag: str, value: str) -> int:
    """An integer >= 1 for a world flag, else a one-line error."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(
            f"{flag}: {value!r}: expected a whole number of GPUs/nodes >= 1 (an elastic range "
            "like 1:4 has no fixed world size); give --world-size N"
        )
    return n


def _launched(ns: argparse.Namespace, launcher: dict[str, str]) -> tuple[str | None, str | None]:
    """(nproc, nnodes) of the line: torchrun's own flags, or the world flags after the script; both given and
    different is refused."""
    out = []
    for flag, dest, key in (("--nproc-per-node", "ne_nproc_per_node", "nproc"), ("--nnodes", "ne_nnodes", "nnodes")):
        given, launched = getattr(ns, dest), launcher.get(key)
        if given is not None and launched is not None and given != launched:
            raise ConfigError(f"{flag}: {given} after the script and {launched} in the launcher's flags; give it once")
        out.append(given if given is not None else launched)
    return out[0], out[1]


def resolve_world(ns: argparse.Namespace, launcher: dict[str, str]) -> tuple[int, str]:
    """(world size, its source in words). An explicit --world-size wins: it is the whole job's GPUs (the pasted
    torchrun line is one launch of it: one node's, or a test run's), and when torchrun's --nproc-per-node x
    --nnodes differs the source says so. Else nproc x nnodes (torchrun's flags or ours); else python alone is one
    process; another launcher (deepspeed, srun ...) is not read, so --world-size is needed."""
    nproc, nnodes = _launched(ns, launcher)
    started = ""
    if nproc is not None or nnodes is not None:
        started = f"--nproc-per-node {nproc or 1} x --nnodes {nnodes or 1}"
    if ns.ne_world_size is not None:
        world = _positive_int("--world-size", str(ns.ne_world_size))
        if not started:
            return world, "--world-size"
        try:
            n = _positive_int("--nproc-per-node", nproc or "1") * _positive_int("--nnodes", nnodes or "1")
        except ConfigError:
            return world, f"--world-size; the launcher's {started} is not a fixed world"
        if n == world:
            return world, f"--world-size, equal to the launcher's {started}"
        return world, (
            f"--world-size; it wins over the {n} processes the pasted launcher starts, {started}: "
            "--world-size is read as the whole job's GPUs, the pasted line as one launch of it, one node's"
        )
    if started:
        p = _positive_int("--nproc-per-node", nproc or "1")
        n = _positive_int("--nnodes", nnodes or "1")
        return p * n, f"--nproc-per-node {p} x --nnodes {n}"
    program = launcher.get("launcher")
    if program in (None, "python", "torchrun"):
        why = "python starts one process" if program == "python" else "Megatron-LM reads WORLD_SIZE"
        return 1, f"default 1 ({why}; give --world-size N)"
    raise ConfigError(
        f"{program}: a launcher whose world neox-epoch does not read (it reads torchrun's "
        "--nproc-per-node x --nnodes); give --world-size N, the GPUs the run uses"
    )
