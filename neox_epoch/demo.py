"""The bundled default: a small deterministic three-source corpus and the shipped configs planned on it.

``neox-epoch demo`` writes ``demo/data/{web,code,books}_text_document.{bin,idx}`` (seeded, ~2 MB in all)
and prints the plan of each shipped config: ``configs/`` of the source, installed as ``neox_epoch/configs``
(setup.py), so an installed package plans them too; none found is an error, never zero plans in silence.
"""

from __future__ import annotations

import argparse
import glob
import os
from typing import Any

from neox_epoch.errors import ConfigError
from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.detect import VERIFIED_MCORE_VERSIONS, megatron_core_version
from neox_epoch.util.helptext import examples

#: name -> (seed, documents, min_len, max_len)
CORPUS = {
    "web": (11, 3000, 20, 400),
    "code": (12, 800, 50, 900),
    "books": (13, 120, 800, 4000),
}


def write_demo_corpus(directory: str) -> list[str]:
    """Write the demo corpus (idempotent, deterministic) and return the prefixes."""
    prefixes = []
    for name, (seed, docs, lo, hi) in CORPUS.items():
        prefix = os.path.join(directory, f"{name}_text_document")
        if not (os.path.isfile(prefix + ".idx") and os.path.isfile(prefix + ".bin")):
            write_random_corpus(prefix, seed, docs, lo, hi, option="--data-dir")
        prefixes.append(prefix)
    return prefixes


def shipped_configs() -> str | None:
    """The configs shipped with neox-epoch: ``neox_epoch/configs`` of an installed package, else ``configs/`` of the
    checkout the package runs from (beside its setup.py); None when neither holds a config."""
    here = os.path.dirname(os.path.abspath(__file__))
    checkout = os.path.dirname(here)
    candidates = [os.path.join(here, "configs")]
    if os.path.isfile(os.path.join(checkout, "setup.py")):
        candidates.append(os.path.join(checkout, "configs"))
    return next((d for d in candidates if glob.glob(os.path.join(d, "*.yml"))), None)


def demo_configs(given: str | None) -> list[str]:
    """The NeoX configs to plan: ``*.yml`` in ``given`` (--configs), else the shipped ones; none is an error."""
    where = given or shipped_configs()
    if where is None:
        raise ConfigError(
            "this install of neox-epoch has no shipped configs (neox_epoch/configs); give --configs DIR, "
            "e.g. the configs/ directory of the neox-epoch source distribution"
        )
    found = sorted(glob.glob(os.path.join(where, "*.yml")))
    if not found:
        raise ConfigError(f"--configs {where}: no NeoX configs (*.yml) there; give the directory holding them")
    return found


def _shown(path: str) -> str:
    """``path`` relative to the working directory when it is below it (as typed in the repository), else whole."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="write the bundled demo corpus and plan every shipped config on it",
        description="Write the bundled demo corpus (three small tokenized sources, a few MB) to --data-dir and run "
        "neox-epoch plan on every NeoX config in --configs: what the planner prints, without a GPU or a framework.",
        **examples(
            "neox-epoch demo                                   # demo/data, the configs shipped with neox-epoch",
            "neox-epoch demo --data-dir demo/data --configs configs",
        ),
    )
    p.add_argument("--data-dir", default=os.path.join("demo", "data"), help="where to write the corpus")
    p.add_argument(
        "--configs",
        help="directory of NeoX configs to plan (default: the shipped ones: configs/ of the source, installed as "
        "neox_epoch/configs)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    main = args.main  # neox-epoch's own entry point, handed over by the CLI: each plan runs as typed
    configs = [_shown(cfg) for cfg in demo_configs(args.configs)]
    prefixes = write_demo_corpus(args.data_dir)
    print(f"demo corpus: {', '.join(p + '.{bin,idx}' for p in prefixes)}\n")
    code = 0
    for cfg in configs:
        print("=" * 100)
        print(f"$ neox-epoch plan {cfg}")
        code = max(code, main(["plan", cfg]))
        print()
    print("=" * 100)
    # the version is named: the demo runs on the core install, where megatron-core is not installed
    version = megatron_core_version() or VERIFIED_MCORE_VERSIONS[-1]
    flags = [
        "--data-path",
        "1",
        prefixes[0],
        "1",
        prefixes[1],
        "--split",
        "98,1,1",
        "--seq-length",
        "512",
        "--micro-batch-size",
        "4",
        "--global-batch-size",
        "16",
        "--lr",
        "1e-4",
        "--eval-iters",
        "2",
        "--eval-interval",
        "100",
        "--num-layers",
        "2",
        "--epochs",
        "1",
        "--framework-version",
        version,
    ]
    print(f"$ neox-epoch plan {' '.join(flags)}   (a Megatron-LM pretrain_gpt.py command line)")
    code = max(code, main(["plan", *flags]))
    return code
