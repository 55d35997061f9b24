"""A Megatron-LM command line as ``neox-epoch launch`` takes it: our options, then the user's line.

Pure (stdlib only): tells a Megatron-LM line from NeoX's deepy form, splits off neox-epoch's own options (they
never reach Megatron-LM's argparse), appends the exact flags ``plan`` computed, lists what changes, and rewrites
the line so every rank runs :data:`WORKER_MODULE` (which installs the hooks) before the user's script.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from neox_epoch.errors import ConfigError

#: the module every rank runs instead of the script (it runs the script as ``__main__`` after the hooks)
WORKER_MODULE = "neox_epoch.megatron_lm.worker"
_TORCH_RUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_SCRIPT = re.compile(r"pretrain_\w*\.py$")
#: neox-epoch's own launch options -> number of values (-1: NAME=E values up to the first other token)
OWN_OPTIONS: dict[str, int] = {
    "--epochs": 1,
    "--source-epochs": -1,
    "--log-dir": 1,
    "--no-enforce": 0,
    "--log-interval": 1,
    "--framework-version": 1,
    "--dry-run": 0,
    "--stages": 1,
    # neox-epoch's global options (neox_epoch.cli.GLOBAL_FLAGS: argparse took them): skipped here
    "--debug": 0,
    "-v": 0,
    "--verbose": 0,
}


def is_python(token: str) -> bool:
    return re.fullmatch(r"python(\d(\.\d+)?)?", os.path.basename(token)) is not None


def is_megatron_line(tokens: Sequence[str]) -> bool:
    """A torchrun / ``python -m torch.distributed.run`` launcher, or a script named ``pretrain_*.py``."""
    if not tokens:
        return False
    first = os.path.basename(tokens[0])
    if first == "torchrun":
        return True
    if is_python(tokens[0]) and len(tokens) > 2 and tokens[1] == "-m" and tokens[2] in _TORCH_RUN_MODULES:
        return True
    return any(_SCRIPT.search(os.path.basename(t)) for t in tokens if not t.startswith("-"))


@dataclass
class LaunchOptions:
    """neox-epoch's own options of a Megatron-LM launch."""

    epochs: str | None = None
    source_epochs: list[str] = field(default_factory=list)
    log_dir: str | None = None
    enforce: bool = True
    log_interval: int | None = None
    framework_version: str | None = None
    dry_run: bool = False
    stages: str | None = None


def split_options(tokens: Sequence[str]) -> tuple[LaunchOptions, list[str]]:
    """(our options, the user's line): our options come first, the line starts at the first other token."""
    opts = LaunchOptions()
    i = 0
    while i < len(tokens):
        name, eq, inline = tokens[i].partition("=")
        if name not in OWN_OPTIONS:
            break
        n = OWN_OPTIONS[name]
        values: list[str] = [inline] if eq else []
        i += 1
        if n < 0:
            while i < len(tokens) and "=" in tokens[i] and not tokens[i].startswith("-") and not eq:
                values.append(tokens[i])
                i += 1
        elif not eq:
            values = list(tokens[i : i + n])
            if len(values) < n:
                raise ConfigError(f"launch: {name}: expects a value")
            i += n
        _set(opts, name, values)
    line = [t for t in tokens[i:]]
    if line and line[0] == "--":
        line = line[1:]
    return opts, line


def _set(opts: LaunchOptions, name: str, values: list[str]) -> None:
    if name == "--epochs":
        opts.epochs = values[0]
    elif name == "--source-epochs":
        if not values:
            raise ConfigError("launch: --source-epochs: expects NAME=E values, e.g. --source-epochs a=1 b=2")
        opts.source_epochs += values
    elif name == "--log-dir":
        opts.log_dir = values[0]
    elif name == "--no-enforce":
        opts.enforce = False
    elif name == "--log-interval":
        if not values[0].isdigit() or int(values[0]) < 1:
            raise ConfigError(f"launch: --log-interval {values[0]!r}: expected a positive number of iterations")
        opts.log_interval = int(values[0])
    elif name == "--framework-version":
        opts.framework_version = values[0]
    elif name == "--dry-run":
        opts.dry_run = True
    elif name == "--stages":
        opts.stages = values[0]


@dataclass(frozen=True)
class Line:
    """The user's line cut at the script: launcher part, script, the script's flags."""

    launcher: list[str]
    script: str
    flags: list[str]

    @property
    def torchrun(self) -> bool:
        if not self.launcher:
            return False
        return os.path.basename(self.launcher[0]) == "torchrun" or (
            is_python(self.launcher[0]) and len(self.launcher) > 2 and self.launcher[2] in _TORCH_RUN_MODULES
        )


def cut_line(line: Sequence[str]) -> Line:
    """Cut at the first ``*.py`` token that is not a flag's value (the training script)."""
    for i, tok in enumerate(line):
        if tok.endswith(".py") and not tok.startswith("-") and "=" not in tok:
            return Line(list(line[:i]), tok, list(line[i + 1 :]))
    raise ConfigError(
        f"launch: no training script (pretrain_gpt.py ...) in {' '.join(line)[:200]!r}; give the line "
        "as you run it: torchrun ... pretrain_gpt.py FLAGS"
    )


def worker_argv(line: Line, python: str) -> list[str]:
    """The line rewritten so the launcher starts :data:`WORKER_MODULE` with the script and its flags."""
    if line.torchrun:
        if "-m" in line.launcher[3 if is_python(line.launcher[0]) else 1 :] or "--module" in line.launcher:
            raise ConfigError("launch: the launcher already runs a module (-m/--module); give the script path")
        return [*line.launcher, "-m", WORKER_MODULE, line.script, *line.flags]
    if line.launcher and is_python(line.launcher[0]):
        return [*line.launcher, "-m", WORKER_MODULE, line.script, *line.flags]
    if line.launcher:
        raise ConfigError(
            f"launch: {line.launcher[0]}: not a launcher neox-epoch can start the hooks through; use "
            "torchrun, python -m torch.distributed.run, or python"
        )
    return [python, "-m", WORKER_MODULE, line.script, *line.flags]


def values_of(flags: Sequence[str], name: str) -> list[str] | None:
    """The last occurrence's values of ``name`` in ``flags`` (None: not given)."""
    found: list[str] | None = None
    i = 0
    while i < len(flags):
        tok_name, eq, inline = flags[i].partition("=")
        if tok_name == name:
            if eq:
                found = [inline]
                i += 1
                continue
            j = i + 1
            while j < len(flags) and not flags[j].startswith("--"):
                j += 1
            found = list(flags[i + 1 : j])
            i = j
            continue
        i += 1
    return found


def changes(flags: Sequence[str], exact_flags: str) -> list[str]:
    """One line per flag the exact flags set: ``--train-iters 10 -> 42``."""
    new = shlex.split(exact_flags)
    out = []
    names = [t for t in new if t.startswith("--")]
    for name in names:
        old = values_of(flags, name)
        now = values_of(new, name) or []
        was = " ".join(old) if old is not None else "(not given)"
        if old == now:
            continue
        out.append(f"{name} {was} -> {' '.join(now)}")
    return out
