"""Compare two scripts/json_snapshot.py snapshots taken before and after the version stamp of the JSON outputs:
the only differences may be the new ``version``/``schema`` keys (neox_epoch.util.schema).

    python scripts/json_stamp_compare.py BEFORE_DIR AFTER_DIR

Per case: the exit code, stderr and every written file must be byte-identical; stdout too, unless it is a JSON
object, which then must start with ``version`` and ``schema`` and equal the earlier one (keys in the same order)
once every ``version``/``schema`` key the earlier object did not have is removed, at any depth (the report's
launches carry the run log's stamp). Prints one line per case that differs and a summary; exit 1 if any differs
or a JSON output lacks the stamp.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

STAMP = ("version", "schema")


def without_new_stamp(after: Any, before: Any) -> Any:
    """``after`` less the stamp keys ``before`` lacks (recursively, where the shapes agree)."""
    if isinstance(after, dict) and isinstance(before, dict):
        return {
            k: without_new_stamp(v, before.get(k)) for k, v in after.items() if not (k in STAMP and k not in before)
        }
    if isinstance(after, list) and isinstance(before, list) and len(after) == len(before):
        return [without_new_stamp(a, b) for a, b in zip(after, before)]
    return after


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def compare_case(before: dict[str, Any], after: dict[str, Any]) -> tuple[str | None, bool]:
    """(what differs, or None; whether stdout is a stamped JSON object)."""
    for key in ("exit_code", "stderr", "files", "argv"):
        if before.get(key) != after.get(key):
            return f"{key} differs", False
    a, b = _json_object(before["stdout"]), _json_object(after["stdout"])
    if a is None or b is None:
        return (None if before["stdout"] == after["stdout"] else "stdout differs (not a JSON object)"), False
    if list(b)[:2] != list(STAMP) or any(k in a for k in STAMP):
        return f"stdout: expected the stamp first, found keys {list(b)[:3]}", False
    stripped = without_new_stamp(b, a)
    if json.dumps(stripped) != json.dumps(a):
        return "stdout: differs beyond the new version/schema keys", True
    return None, True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    names = sorted(f for f in os.listdir(argv[0]) if f.endswith(".json") and f != "index.json")
    if names != sorted(f for f in os.listdir(argv[1]) if f.endswith(".json") and f != "index.json"):
        print("the two snapshots hold different cases")
        return 1
    differ, stamped = 0, 0
    for name in names:
        with open(os.path.join(argv[0], name), encoding="utf-8") as fa, open(os.path.join(argv[1], name)) as fb:
            what, is_json = compare_case(json.load(fa), json.load(fb))
        stamped += is_json
        if what is not None:
            differ += 1
            print(f"{name[:-5]}: {what}")
    print(
        f"{len(names)} cases: {len(names) - differ} identical once the new version/schema keys are removed "
        f"({stamped} JSON outputs, each stamped), {differ} different"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
