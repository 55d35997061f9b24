"""Run GPT-NeoX's own resume logic on index datasets and print where each resumed loader draws.

``python resume_replay.py NEOX_DIR CASES.json`` (in NeoX's venv; tests/resume/test_resume.py): for each case
``{"iteration", "micro", "dp", "gas", "samples"}`` a dataset whose sample ``i`` is ``i`` is wrapped in NeoX's
``DistributedBatchSampler`` for every data-parallel rank (as ``make_data_loader`` does: a SequentialSampler,
global batch micro * dp, drop_last), NeoX's ``shift_and_wrap_data_loaders`` shifts it for ``iteration`` with
``gas`` accumulation steps, and the first ``gas`` batches each rank then yields are recorded. A case with
``"valid_samples"`` also has a validation dataset of that many samples, shifted with its ``eval_interval`` and
``eval_iters``, from which ``valid_batches`` batches are drawn (the resumed run's evaluations). Prints one JSON
list: per case ``{"train": [...], "valid": [...]}``, the sample positions drawn, batch by batch, ranks in order.
"""

import contextlib
import io
import json
import sys
import types

sys.path.insert(0, sys.argv[1])

import torch  # noqa: E402
from megatron.data.data_utils import shift_and_wrap_data_loaders  # noqa: E402
from megatron.data.samplers import DistributedBatchSampler  # noqa: E402


def _loader(samples: int, case: dict, rank: int) -> torch.utils.data.DataLoader:
    dataset = list(range(samples))
    sampler = DistributedBatchSampler(
        sampler=torch.utils.data.SequentialSampler(dataset),
        batch_size=case["micro"] * case["dp"],
        drop_last=True,
        rank=rank,
        world_size=case["dp"],
    )
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler)


def drawn(case: dict) -> dict:
    valid_samples = case.get("valid_samples")
    train: list[list[int]] = []
    valid: list[list[int]] = []
    for rank in range(case["dp"]):
        args = types.SimpleNamespace(
            iteration=case["iteration"],
            gradient_accumulation_steps=case["gas"],
            eval_interval=case.get("eval_interval", 1000),
            eval_iters=case.get("eval_iters", 0),
        )
        loaders = {
            "train": _loader(case["samples"], case, rank),
            "test": None,
            "valid": _loader(valid_samples, case, rank) if valid_samples else None,
        }
        with contextlib.redirect_stdout(io.StringIO()):  # NeoX prints the start iterations
            train_it, valid_it, _ = shift_and_wrap_data_loaders(args, loaders)
        train.append([int(x) for _ in range(case["gas"]) for x in next(train_it)])
        valid.append([int(x) for _ in range(case.get("valid_batches", 0)) for x in next(valid_it)])
    # the global batch of each loader batch, ranks in order: batch s of rank r is drawn[r][s*micro:(s+1)*micro]
    micro = case["micro"]

    def merged(per_rank: list[list[int]], batches: int) -> list[int]:
        return [x for s in range(batches) for r in range(case["dp"]) for x in per_rank[r][s * micro : (s + 1) * micro]]

    return {"train": merged(train, case["gas"]), "valid": merged(valid, case.get("valid_batches", 0))}


with open(sys.argv[2], encoding="utf-8") as f:
    cases = json.load(f)
print(json.dumps([drawn(c) for c in cases]))
