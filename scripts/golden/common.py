"""What every part of scripts/neox_golden.py shares: NeoX's seed, the headline case, the cache limits, die()."""

from __future__ import annotations

import sys
from typing import NoReturn

#: NeoX's default seed (neox_args.seed)
NEOX_SEED = 1234
#: the case whose exposure is the project's headline
HEADLINE_CASE = "b_one_path_one_epoch"
#: files bigger than this are not copied into the fixture cache
MAX_COPY_BYTES = 512 * 1024
#: the fixture cache must stay below this
MAX_CACHE_BYTES = 2 * 1024 * 1024
WRAP_WARNING = "WARNING: Got index out of bounds"


def die(message: str) -> NoReturn:
    """Print a one-line error and exit with status 2."""
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    print(f"neox_golden: error: {first}", file=sys.stderr)
    sys.exit(2)
