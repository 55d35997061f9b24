"""Run GPT-NeoX's own blend code and print, per case, the blend's dataset and sample indices.

``python blend_replay.py NEOX_DIR CASES.json`` (in NeoX's venv; tests/resume/test_resume_moves.py): for each case
``{"weights": [...], "size": N}`` the weights are normalized and NeoX's compiled
``megatron.data.helpers.build_blending_indices`` fills ``dataset_index`` (uint8) and ``dataset_sample_index``
(int64) of ``size`` entries, exactly as ``BlendableDataset.__init__`` does. Prints one JSON list: per case
``{"dataset_index": [...], "dataset_sample_index": [...]}``.
"""

import json
import sys

sys.path.insert(0, sys.argv[1])

import numpy as np  # noqa: E402
from megatron.data import helpers  # noqa: E402


def blend(weights: list, size: int) -> dict:
    normalized = np.array(weights, dtype=np.float64)
    normalized /= np.sum(normalized)  # as BlendableDataset.__init__
    dataset_index = np.zeros(size, dtype=np.uint8)
    dataset_sample_index = np.zeros(size, dtype=np.int64)
    helpers.build_blending_indices(dataset_index, dataset_sample_index, normalized, len(weights), size, False)
    return {"dataset_index": dataset_index.tolist(), "dataset_sample_index": dataset_sample_index.tolist()}


if __name__ == "__main__":
    with open(sys.argv[2], encoding="utf-8") as f:
        cases = json.load(f)
    print(json.dumps([blend(c["weights"], c["size"]) for c in cases]))
