"""Run GPT-NeoX's own resume logic on index datasets and print where each resumed train loader starts.

``python resume_replay.py NEOX_DIR CASES.json`` (in NeoX's venv; tests/test_resume.py): for each case
``{"iteration", "micro", "dp", "gas", "samples"}`` a dataset whose sample ``i`` is ``i`` is wrapped in NeoX's
``DistributedBatchSampler`` for every data-parallel rank (as ``make_data_loader`` does: a SequentialSampler,
global batch micro * dp, drop_last), NeoX's ``shift_and_wrap_data_loaders`` shifts it for ``iteration`` with
``gas`` accumulation steps, and the first ``gas`` batches each rank then yields are recorded. Prints one JSON
list: per case, the sample positions of the first resumed iteration, ranks in order.
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


def first_iteration(case: dict) -> list[int]:
    dataset = list(range(case["samples"]))
    drawn: list[int] = []
    for rank in range(case["dp"]):
        sampler = DistributedBatchSampler(sampler=torch.utils.data.SequentialSampler(dataset),
                                          batch_size=case["micro"] * case["dp"], drop_last=True, rank=rank,
                                          world_size=case["dp"])
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)
        args = types.SimpleNamespace(iteration=case["iteration"], gradient_accumulation_steps=case["gas"],
                                     eval_interval=1000, eval_iters=0)
        with contextlib.redirect_stdout(io.StringIO()):  # NeoX prints the start iteration
            train, _, _ = shift_and_wrap_data_loaders(args, {"train": loader, "valid": None, "test": None})
        drawn.append([int(x) for _ in range(case["gas"]) for x in next(train)])
    # the global batch of each accumulation step, ranks in order: step s of rank r is drawn[r][s*micro:(s+1)*micro]
    micro = case["micro"]
    return [x for s in range(case["gas"]) for r in range(case["dp"]) for x in drawn[r][s * micro:(s + 1) * micro]]


with open(sys.argv[2], encoding="utf-8") as f:
    cases = json.load(f)
print(json.dumps([first_iteration(c) for c in cases]))
