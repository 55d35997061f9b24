"""Save a real DeepSpeed checkpoint on CPU the way GPT-NeoX does (tests/formats/test_checkpoint.py).

``python tests/helpers/ds_save_probe.py SAVE_DIR``: a one-rank ``deepspeed.initialize`` of a 4x4 linear model
(train_batch_size 8 = micro 2 x grad-accum 4 x dp 1) and ``engine.save_checkpoint(SAVE_DIR, tag="global_step7",
client_state=...)`` with NeoX's client state keys (``iteration``, ``args``).

As in ds_rank_probe.py, DeepSpeed's CPU-only shared-memory op is not built (it JIT-compiles for 30-50 s on first use
and plays no part in a checkpoint); the engine, its checkpoint and the files it writes are DeepSpeed's own.
"""

import os
import socket
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
sock.close()
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
import importlib  # noqa: E402

import deepspeed  # noqa: E402
import torch  # noqa: E402

importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None

model = torch.nn.Linear(4, 4)
cfg = {
    "train_batch_size": 8,
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
    "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
engine.save_checkpoint(sys.argv[1], tag="global_step7", client_state={"iteration": 7, "args": {"num_layers": 2}})
