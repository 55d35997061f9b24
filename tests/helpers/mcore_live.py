"""In-process helpers for tests that build with the installed megatron-core (a 1-process gloo group)."""

from __future__ import annotations

import os
import socket


def init_gloo() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=0, world_size=1)


def null_tokenizer():  # type: ignore[no-untyped-def]
    try:
        from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer  # type: ignore

        return NullTokenizer(vocab_size=65536)
    except ImportError:
        pass
    try:
        from megatron.training.tokenizer.tokenizer import _NullTokenizer  # type: ignore

        return _NullTokenizer(65535)
    except ImportError:
        pass
    from megatron.core.datasets.megatron_tokenizer import MegatronTokenizer  # type: ignore

    class _Null(MegatronTokenizer):  # minimal tokenizer for the index path only
        def __init__(self) -> None:
            super().__init__(None, vocab_size=65536)

        def tokenize(self, text):  # type: ignore[no-untyped-def]
            return [int(x) for x in text.split()]

        def detokenize(self, ids):  # type: ignore[no-untyped-def]
            return " ".join(map(str, ids))

        @property
        def vocab(self):  # type: ignore[no-untyped-def]
            return {}

        @property
        def inv_vocab(self):  # type: ignore[no-untyped-def]
            return {}

        @property
        def vocab_size(self) -> int:
            return 65536

        @property
        def eod(self) -> int:
            return 0

    return _Null()


def build(prefixes, weights, split, sizes, seq_length, cache, seed=1234, surplus=None, add_extra_token=True):  # type: ignore[no-untyped-def]
    """Build train/valid/test with the real BlendedMegatronDatasetBuilder and GPTDataset."""
    import dataclasses

    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    init_gloo()
    kw = dict(
        random_seed=seed,
        sequence_length=seq_length,
        blend=(list(prefixes), weights),
        split=split,
        path_to_cache=cache,
        tokenizer=null_tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        add_extra_token_to_sequence=add_extra_token,
    )
    names = {f.name for f in dataclasses.fields(GPTDatasetConfig)}
    if surplus is not None and "mid_level_dataset_surplus" in names:
        kw["mid_level_dataset_surplus"] = surplus
    kw = {k: v for k, v in kw.items() if k in names}
    cfg = GPTDatasetConfig(**kw)
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, cfg).build()
