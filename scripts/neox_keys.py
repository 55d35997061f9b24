"""Regenerate neox_epoch/data/neox_keys.json: the config key names (and declared types) GPT-NeoX accepts.

Reads the dataclass field declarations of NeoX's argument classes with ``ast`` (nothing is imported or
copied but each field's name and type annotation). Run: ``NEOX_DIR=<checkout> python scripts/neox_keys.py``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

FILES = ("megatron/neox_arguments/neox_args.py", "megatron/neox_arguments/deepspeed_args.py")


def main() -> int:
    root = os.environ.get("NEOX_DIR")
    if not root or not os.path.isdir(root):
        print("NEOX_DIR must point at a GPT-NeoX checkout", file=sys.stderr)
        return 2
    keys: dict[str, str] = {}
    for rel in FILES:
        tree = ast.parse(open(os.path.join(root, rel), encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        keys[item.target.id] = ast.unparse(item.annotation)
    try:
        commit = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = os.environ.get("NEOX_COMMIT", "unknown")
    out = os.path.join(os.path.dirname(__file__), "..", "neox_epoch", "data", "neox_keys.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"neox_commit": commit, "keys": dict(sorted(keys.items()))}, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"{len(keys)} keys written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
