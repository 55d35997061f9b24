"""What each worker runs under ``neox-epoch launch``: ``python -m neox_epoch.neox.worker train.py ARGS``.

The deepspeed launcher (``--module``) starts this module instead of the user script. It reads the block
and the planned settings from ``$NEOX_EPOCH_BLOCK``, calls ``neox_epoch.neox.install`` (the hooks must be
in place before NeoX builds its data), then runs the user script unchanged as ``__main__`` with the
arguments it would have had (``--local_rank``, ``--deepspeed_config``, ``--megatron_config``). No
sitecustomize, no change to NeoX's files; the script's directory goes first on ``sys.path`` as it would
for ``python train.py``.
"""

from __future__ import annotations

import os
import runpy
import sys

from neox_epoch.errors import ConfigError, NeoxEpochError
from neox_epoch.neox.block import ENV_VAR, from_environ


def split_argv(argv: list[str]) -> tuple[str, list[str]]:
    """(user script, its arguments): the first argument not starting with '-' is the script."""
    for i, a in enumerate(argv):
        if not a.startswith("-"):
            return a, argv[:i] + argv[i + 1 :]
    raise ConfigError("neox_epoch.neox.worker: no user script in the arguments; expected train.py ...")


def main(argv: list[str] | None = None) -> int:
    script, rest = split_argv(list(sys.argv[1:] if argv is None else argv))
    hb = from_environ()
    if hb is None:
        raise ConfigError(f"neox_epoch.neox.worker: {ENV_VAR} is not set; start workers with neox-epoch launch")
    sys.argv = [script, *rest]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    from neox_epoch.neox.installer import install

    install(hb)
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NeoxEpochError as err:
        print(f"neox-epoch worker: error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
