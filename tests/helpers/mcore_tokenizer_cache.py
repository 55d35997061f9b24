"""Build one real megatron-core GPTDataset cache with the tokenizer Megatron-LM's pretrain_gpt.py builds for
``--tokenizer-type NullTokenizer --vocab-size N`` (run with the Megatron-LM tree of that version first on
PYTHONPATH, under the stack's Python).

Usage: python mcore_tokenizer_cache.py PREFIX CACHE_DIR VOCAB_SIZE

Megatron-LM 0.16.1's ``megatron.training.global_vars`` builds it with ``megatron.training.tokenizer.build_tokenizer``
(a MegatronLegacyTokenizer); 0.19's with ``megatron.core.tokenizers.utils.build_tokenizer``. Prints the tokenizer's
``unique_identifiers`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys


def build_tokenizer(vocab_size: int):  # type: ignore[no-untyped-def]
    import megatron.training.global_vars as global_vars

    args = argparse.Namespace(
        tokenizer_type="NullTokenizer",
        vocab_size=vocab_size,
        rank=0,
        make_vocab_size_divisible_by=128,
        tensor_model_parallel_size=1,
        pad_vocab_size=False,
        metadata_path=None,
        null_tokenizer_eod_id=None,
        null_tokenizer_pad_id=None,
    )
    return global_vars.build_tokenizer(args)


def main(argv: list[str]) -> int:
    prefix, cache, vocab = argv[0], argv[1], int(argv[2])
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    tokenizer = build_tokenizer(vocab)
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=16,
        blend=([prefix], None),
        split="1,0,0",
        tokenizer=tokenizer,
        path_to_cache=cache,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    BlendedMegatronDatasetBuilder(GPTDataset, [40, None, None], lambda: True, config).build()
    print(json.dumps(tokenizer.unique_identifiers))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
