"""Batch sizes consistent with the world the deepspeed launcher starts (``neox-epoch check-batch``).

Modules: ``config`` (read NeoX YAML / DeepSpeed JSON batch, parallel and launcher keys), ``check``
(pure derivation and assertion rules), ``fix`` (consistent values keeping train_batch_size), ``guard``
(worker-side WORLD_SIZE check), ``world`` (the launcher's world via DeepSpeed's runner functions, and
NeoX's own GPU count), ``preflight`` (all of it as one call) and ``cli``.

Importing this package imports neither torch nor DeepSpeed; ``world`` and ``preflight`` import them
when their functions are called.
"""

from neox_epoch.batch.guard import check_world

__all__ = ["check_world"]
