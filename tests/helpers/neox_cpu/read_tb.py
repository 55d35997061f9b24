"""Print the scalars of TensorBoard event files as JSON: ``{tag: [[step, value], ...]}`` (test helper).

Run with the NeoX venv's Python (it has tensorboard, which NeoX's own ``tensorboard_dir`` needs):
``python read_tb.py TB_DIR [TAG_PREFIX]``. Every event file under TB_DIR is read, oldest first, so the
scalars of a resumed run follow those of the launch before it.
"""

from __future__ import annotations

import glob
import json
import os
import sys

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.util import tensor_util


def scalars(tb_dir: str, prefix: str = "") -> dict[str, list[list[float]]]:
    out: dict[str, list[list[float]]] = {}
    files = sorted(glob.glob(os.path.join(tb_dir, "**", "events.out.tfevents.*"), recursive=True), key=os.path.getmtime)
    for path in files:
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                if not value.tag.startswith(prefix):
                    continue
                if value.HasField("simple_value"):
                    number = float(value.simple_value)
                elif value.HasField("tensor"):
                    number = float(tensor_util.make_ndarray(value.tensor))
                else:
                    continue
                out.setdefault(value.tag, []).append([int(event.step), number])
    return out


if __name__ == "__main__":
    print(json.dumps(scalars(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")))
