"""What surrounds Megatron-LM's flags on a pasted command line.

``neox-epoch plan [options] [torchrun FLAGS] pretrain_gpt.py FLAGS``: the options given before the launcher
(neox-epoch's ``--world-size``, or Megatron-LM flags placed there), the launcher and its own flags (torchrun's
``--nproc-per-node`` x ``--nnodes`` is the world the line starts), the script, and Megatron-LM's flags after it.
Also: command lines of other frameworks (Megatron-DeepSpeed, NeMo, GPT-NeoX's deepy.py), recognised so they are
refused once, naming the framework, instead of one unknown flag per rerun.

Pure: stdlib only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from neox_epoch.errors import ConfigError

#: neox-epoch's world flags (read by the Megatron-LM parser too)
WORLD_FLAGS = ("--world-size", "--nproc-per-node", "--nproc_per_node", "--nnodes")

#: torchrun's options (torch.distributed.run's parser, torch 2.x; torch.distributed.launch adds --use-env)
#: -> how many values each takes. Underscore spellings are accepted too (torchrun has both).
_TORCHRUN_ARITY: dict[str, int] = {
    "--nnodes": 1,
    "--nproc-per-node": 1,
    "--rdzv-backend": 1,
    "--rdzv-endpoint": 1,
    "--rdzv-id": 1,
    "--rdzv-conf": 1,
    "--standalone": 0,
    "--max-restarts": 1,
    "--monitor-interval": 1,
    "--start-method": 1,
    "--event-log-handler": 1,
    "--role": 1,
    "--module": 0,
    "-m": 0,
    "--no-python": 0,
    "--run-path": 0,
    "--log-dir": 1,
    "--redirects": 1,
    "-r": 1,
    "--tee": 1,
    "-t": 1,
    "--local-ranks-filter": 1,
    "--duplicate-stdout-filters": 1,
    "--duplicate-stderr-filters": 1,
    "--node-rank": 1,
    "--master-addr": 1,
    "--master-port": 1,
    "--local-addr": 1,
    "--logs-specs": 1,
    "--numa-binding": 1,
    "--signals-to-handle": 1,
    "--shutdown-timeout": 1,
    "--virtual-local-rank": 0,
    "--use-env": 0,
}
#: programs that start the script (a token equal to one ends a variable-length flag's values)
LAUNCHER_PROGRAMS = ("torchrun", "python", "python3", "deepspeed", "srun", "mpirun", "accelerate")
_TORCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def torchrun_option(token: str) -> str | None:
    """torchrun's canonical option for ``token`` (``--nproc_per_node=8`` -> ``--nproc-per-node``), accepting
    the unique prefixes torchrun's argparse accepts (``--nnode``); None when torchrun has no such option."""
    name = token.partition("=")[0]
    if not name.startswith("-"):
        return None
    name = "--" + name[2:].replace("_", "-") if name.startswith("--") else name
    if name in _TORCHRUN_ARITY:
        return name
    matches = [o for o in _TORCHRUN_ARITY if o.startswith("--") and name.startswith("--") and o.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def is_script(argv: Sequence[str], i: int, specs: Mapping[str, Any]) -> bool:
    """``argv[i]`` is the training script: a ``*.py`` token that is not a flag's value."""
    tok = argv[i]
    follows_flag = i > 0 and argv[i - 1].partition("=")[0] in specs and "=" not in argv[i - 1]
    return tok.endswith(".py") and not tok.startswith("-") and not follows_flag


def script_index(argv: Sequence[str], specs: Mapping[str, Any]) -> int | None:
    """Where the training script is, or None (flags only)."""
    return next((i for i in range(len(argv)) if is_script(argv, i, specs)), None)


def _arity(token: str, specs: Mapping[str, Any], rest: Sequence[str]) -> int:
    """How many of ``rest`` are values of the option ``token`` placed before the launcher."""
    name, eq, _ = token.partition("=")
    if eq:
        return 0
    if name in WORLD_FLAGS:
        return 1
    spec = specs.get(name)
    if spec is None or spec["action"] in ("store_true", "store_false", "boolean_optional"):
        return 0  # an unknown flag is reported by the Megatron-LM parser, with a did-you-mean
    nargs = spec["nargs"]
    if nargs is None:
        return 1
    if isinstance(nargs, int):
        return nargs
    n = 0  # "?" / "+" / "*": up to the next option or launcher program
    while n < len(rest) and not rest[n].startswith("-") and os.path.basename(rest[n]) not in LAUNCHER_PROGRAMS:
        n += 1
    return min(n, 1) if nargs == "?" else n


@dataclass
class PastedLine:
    """A pasted command line cut into its parts."""

    before: list[str] = field(default_factory=list)
    """Options given before the launcher (or before the script when there is none): they count."""
    launcher: list[str] = field(default_factory=list)
    """The launcher program and its own flags (``torchrun --nproc-per-node 8``)."""
    script: str | None = None
    """The training script (``pretrain_gpt.py``)."""
    after: list[str] = field(default_factory=list)
    """The script's flags."""


def cut(argv: Sequence[str], specs: Mapping[str, Any]) -> PastedLine:
    """Cut ``argv`` into options before the launcher, the launcher with its flags, the script and its flags.
    ``--world-size`` given among the launcher's flags is neox-epoch's and joins ``before``; a Megatron-LM flag
    given to torchrun (before the script) is refused: torchrun would reject it."""
    at = script_index(argv, specs)
    if at is None:
        return PastedLine(after=list(argv))
    line = PastedLine(script=argv[at], after=list(argv[at + 1 :]))
    pre = list(argv[:at])
    i = 0
    while i < len(pre) and (pre[i].startswith("-") or _ENV_ASSIGNMENT.match(pre[i])):
        if pre[i].startswith("-"):
            n = 1 + _arity(pre[i], specs, pre[i + 1 :])
            line.before += pre[i : i + n]
        else:
            n = 1  # NAME=VALUE: an environment assignment pasted with the line
        i += n
    _launcher_flags(pre[i:], line, specs)
    return line


def _launcher_flags(tokens: list[str], line: PastedLine, specs: Mapping[str, Any]) -> None:
    """The launcher and its flags into ``line.launcher``; ``--world-size`` among them into ``line.before``."""
    torchrun = launcher_kind(tokens) == "torchrun"
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        name, eq, _ = tok.partition("=")
        if name == "--world-size":
            n = 1 if eq else 2
            line.before += tokens[i : i + n]
            i += n
            continue
        option = torchrun_option(tok) if torchrun else None
        if torchrun and option is None and name in specs:
            raise ConfigError(
                f"{name}: given to {os.path.basename(tokens[0])} before {line.script}, where the "
                f"launcher reads it (and rejects it: it is a Megatron-LM flag); move it after "
                f"{line.script}"
            )
        n = 1 + (_TORCHRUN_ARITY[option] if option is not None and not eq else 0)
        line.launcher += tokens[i : i + n]
        i += n


def launcher_kind(tokens: Sequence[str]) -> str | None:
    """ "torchrun" (torchrun, python -m torch.distributed.run/launch), "python" (one process), another
    launcher's name, or None (no launcher)."""
    if not tokens:
        return None
    prog = os.path.basename(tokens[0])
    if prog == "torchrun":
        return "torchrun"
    if re.fullmatch(r"python[0-9.]*", prog):
        modules = [tokens[i + 1] for i in range(len(tokens) - 1) if tokens[i] == "-m"]
        return "torchrun" if any(m in _TORCH_MODULES for m in modules) else "python"
    return prog


def launcher_world(tokens: Sequence[str]) -> dict[str, str]:
    """The launcher's name ("launcher"), and torchrun's --nproc-per-node ("nproc") and --nnodes ("nnodes")."""
    kind = launcher_kind(tokens)
    if kind is None:
        return {}
    found = {"launcher": kind}
    if kind != "torchrun":
        return found
    for i, tok in enumerate(tokens):
        option = torchrun_option(tok)
        if option in ("--nproc-per-node", "--nnodes"):
            _, eq, value = tok.partition("=")
            if not eq:
                value = tokens[i + 1] if i + 1 < len(tokens) else ""
            found["nnodes" if option == "--nnodes" else "nproc"] = value
    return found


def values_of(tokens: Sequence[str], name: str) -> list[str]:
    """Each value given to ``name`` in ``tokens`` (its tokens up to the next option, joined)."""
    out = []
    for i, tok in enumerate(tokens):
        flag, eq, value = tok.partition("=")
        if flag != name:
            continue
        if not eq:
            rest = []
            for t in tokens[i + 1 :]:
                if t.startswith("--"):
                    break
                rest.append(t)
            value = " ".join(rest)
        out.append(value)
    return out


def check_given_twice(before: Sequence[str], after: Sequence[str], script: str | None) -> None:
    """A flag given before the script and again after it with another value: one line naming both."""
    for tok in before:
        name = tok.partition("=")[0]
        if not name.startswith("--"):
            continue
        first, again = values_of(before, name), values_of(after, name)
        if again and again[-1] != first[-1]:
            raise ConfigError(
                f"{name}: {first[-1]} before {script or 'the flags'} and {again[-1]} after it; give it "
                "once (neox-epoch counts options before, between and after the script alike)"
            )


# ------------------------------------------------------------------------ command lines of other frameworks

#: flags only Megatron-DeepSpeed's pretrain_gpt.py has (its examples_deepspeed/ scripts pass them)
MEGATRON_DEEPSPEED_FLAGS = frozenset(
    {
        "--deepspeed",
        "--deepspeed_config",
        "--deepspeed-config",
        "--zero-stage",
        "--deepspeed-activation-checkpointing",
        "--no-pipeline-parallel",
        "--ds-sequence-parallel-size",
        "--train-tokens",
        "--lr-decay-tokens",
        "--lr-warmup-tokens",
        "--moe-expert-parallel-size",
        "--create-moe-param-group",
        "--partition-activations",
        "--contigious-checkpointing",
        "--synchronize-each-layer",
        "--cpu-optimizer",
        "--moe-loss-coeff",
        "--moe-train-capacity-factor",
        "--moe-eval-capacity-factor",
        "--moe-min-capacity",
        "--disable-moe-token-dropping",
        "--curriculum-learning-legacy",
        "--use-flash-attn-v2",
        "--num-key-value-heads",
        "--deepspeed-mpi",
        "--zero-allgather-bucket-size",
        "--zero-reduce-bucket-size",
        "--random-ltd",
        "--universal-checkpoint",
        "--log-optimizer-states-to-tensorboard",
    }
)
#: flags of Megatron-LM before 2023 (and of Megatron-DeepSpeed, forked then) that Megatron-LM removed since
OLD_MEGATRON_FLAGS = frozenset(
    {
        "--data-impl",
        "--checkpoint-activations",
        "--checkpoint-num-layers",
        "--DDP-impl",
        "--distribute-checkpointed-activations",
        "--activations-checkpoint-method",
        "--activations-checkpoint-num-layers",
        "--no-query-key-layer-scaling",
        "--log-batch-size-to-tensorboard",
    }
)
#: a Hydra override (NeMo): model.micro_batch_size=4, +trainer.x=1, ~model.y
_HYDRA_OVERRIDE = re.compile(r"^(\+{1,2}|~)?[A-Za-z_]\w*(\.\w+)+=")


def _flags(tokens: Sequence[str]) -> list[str]:
    """The --options in ``tokens``, in order, once each."""
    return list(dict.fromkeys(t.partition("=")[0] for t in tokens if t.startswith("--")))


def foreign_framework(argv: Sequence[str], specs: Mapping[str, Any]) -> tuple[str, str] | None:
    """(framework, evidence) when ``argv`` is another framework's command line, else None."""
    at = script_index(argv, specs)
    script = os.path.basename(argv[at]) if at is not None else ""
    launcher = os.path.basename(argv[0]) if at and argv else ""
    hydra = [t for t in argv if _HYDRA_OVERRIDE.match(t)]
    if re.fullmatch(r"megatron_\w+_(pretraining|continue_training)\.py", script) or hydra or "--config-name" in argv:
        shown = ([script] if script else []) + hydra[:2]
        return "NeMo (a Hydra-configured NeMo training script)", ", ".join(shown or ["--config-name"])
    if script == "deepy.py" or (script == "train.py" and any(t.endswith((".yml", ".yaml")) for t in argv)):
        return "a GPT-NeoX launch (deepy.py train.py CONFIG.yml ...)", script
    flags = _flags(argv)
    ds = [f for f in flags if f in MEGATRON_DEEPSPEED_FLAGS]
    old = [f for f in flags if f in OLD_MEGATRON_FLAGS]
    if len(ds) >= 2 or (ds and (old or launcher == "deepspeed")):
        return "Megatron-DeepSpeed", ", ".join((ds + old)[:4])
    if len(old) >= 2:
        return "an older Megatron-LM or Megatron-DeepSpeed (flags Megatron-LM removed)", ", ".join(old[:4])
    return None


def refuse_foreign(argv: Sequence[str], specs: Mapping[str, Any], megatron_lm_version: str) -> None:
    """Refuse another framework's command line once, in one line: what it looks like and what is supported."""
    found = foreign_framework(argv, specs)
    if found is None:
        return
    name, evidence = found
    if name.startswith("a GPT-NeoX"):
        yml = [t for t in argv if t.endswith((".yml", ".yaml"))]
        raise ConfigError(
            f"this command line looks like {name} ({evidence}): give neox-epoch plan the config files "
            f"themselves: neox-epoch plan {' '.join(yml) or 'CONFIG.yml ...'}"
        )
    raise ConfigError(
        f"this command line looks like {name} ({evidence}): not supported by neox-epoch; it plans "
        f"GPT-NeoX configs (neox-epoch plan CONFIG.yml ...) and Megatron-LM {megatron_lm_version}'s "
        "pretrain_gpt.py flags (torchrun ... pretrain_gpt.py --data-path ...)"
    )
