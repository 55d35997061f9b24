"""Ground truth from REAL GPT-NeoX's learning-rate scheduler, not a pytest file.

Usage (run by NeoX's Python, with NeoX's tree as the working directory)::

    python tests/helpers/neox_lr_truth.py '{"args": {NeoX args}, "at": [iterations]}'

Builds NeoX's scheduler with ``megatron.training.get_learning_rate_scheduler`` (its decay-length arithmetic:
``lr_decay_iters``, else ``floor(train_iters * lr_decay_fraction)``, else ``train_iters``; ``warmup_iter = warmup *
that``) over a one-group optimizer of no parameters (test-side stand-in: the scheduler only sets ``lr`` on the
optimizer's param groups), steps it once per iteration as NeoX's train loop does, and prints JSON:
``{"lr_at": {iteration: the group's lr after that many steps}, "warmup_iter", "end_iter"}``.
"""

from __future__ import annotations

import json
import os
import sys
import types


def main() -> None:
    sys.path.insert(0, os.getcwd())
    from megatron.training import get_learning_rate_scheduler

    case = json.loads(sys.argv[1])
    args = types.SimpleNamespace(
        no_load_optim=False,
        deepspeed=True,
        optimizer_type="adam",
        use_mup=False,
        use_checkpoint_lr_scheduler=False,
        override_lr_scheduler=False,
        **case["args"],
    )
    group: dict[str, object] = {"lr": None}
    sched = get_learning_rate_scheduler(types.SimpleNamespace(param_groups=[group]), args)
    out, done = {}, 0
    for it in sorted(case["at"]):
        for _ in range(it - done):
            sched.step()
        done = it
        out[str(it)] = group["lr"]
    print(json.dumps({"lr_at": out, "warmup_iter": sched.warmup_iter, "end_iter": sched.end_iter}))


if __name__ == "__main__":
    main()
