"""What the parts of scripts/json_snapshot.py share: the checkout's paths, the launch variables, the index's name,
the corpus writers (the only imports of the package) and the file writers."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Protocol

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(REPO, "tests", "fixtures", "neox", "neox_golden.json")
NEOX_CACHE = os.path.join(REPO, "tests", "fixtures", "neox", "neox_cache")
LAUNCH_ENV = ("DLTS_HOSTFILE", "LOCAL_SIZE", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR")
#: fields found to vary between two runs on the same code: none so far (see the module docstring)
NORMALISED_FIELDS: tuple[str, ...] = ()
INDEX = "index.json"


class AddCase(Protocol):
    """Adds a case: its name, its argv after ``neox_epoch.cli``, the files (relative to the work directory) the
    command writes."""

    def __call__(self, name: str, argv: list[str], files: tuple[str, ...] = ()) -> None: ...


def corpus_writers() -> tuple[Any, Any, Any]:
    """(write_random_corpus, write_sized_corpus, write_demo_corpus): the only imports of the package here."""
    import importlib

    sys.path.insert(0, REPO)
    for name in ("neox_epoch.corpus", "neox_epoch.formats.corpus"):
        try:
            corpus = importlib.import_module(name)
            break
        except ImportError:
            continue
    else:
        raise SystemExit("json_snapshot: no neox_epoch.corpus or neox_epoch.formats.corpus to write corpora with")
    demo = importlib.import_module("neox_epoch.demo")
    return corpus.write_random_corpus, corpus.write_sized_corpus, demo.write_demo_corpus


def write_text(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write_json(path: str, obj: Any) -> str:
    return write_text(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")
