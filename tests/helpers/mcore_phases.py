"""Build what one Megatron-LM phase builds, with the REAL megatron-core builder (not a pytest file).

Megatron-LM (core_v0.19.0, ``megatron/training/training.py``) builds a phase's train dataset with
``get_train_valid_test_num_samples()``: the train size asked of ``BlendedMegatronDatasetBuilder`` is the
phase's own samples, ``(next transition - last transition) * global_batch_size``; the data loader starts
at ``(iteration - last_transition) * global_batch_size``, so a fresh phase starts at its sample 0.
``pretrain_gpt.core_gpt_dataset_config_from_args`` passes ``random_seed=args.seed`` and
``mid_level_dataset_surplus=args.mid_level_dataset_surplus`` (default 0.005).

``phase_draws`` builds one phase exactly so (``GPTDatasetConfig(blend=(prefixes, weights), split="100,0,0")``,
sizes ``[phase_samples, 0, 0]``) and returns, per source, the identities of the samples the phase trains
in the order it trains them (the document token spans each sample starts, so builds compare).
Import only where megatron-core is installed (it imports torch).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

VOCAB_SIZE = 50_000


def _null_tokenizer() -> object:
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    return NullTokenizer(VOCAB_SIZE)


def _ensure_gloo(workdir: str) -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        store = os.path.join(workdir, "gloo.store")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)


Span = tuple[tuple[int, int, int], ...]


def _identity(gpt: Any, sample: int) -> Span:
    """The tokens sample ``sample`` starts (document, first, stop): to the next sample's start, so the
    extra label token each sample shares with the next is not counted twice. Comparable across builds with
    other seeds or epochs, whose samples are cut from the documents at other places."""
    gpt._query_document_sample_shuffle_indices(sample)  # loads the indices when they are memory-mapped lazily
    j = int(gpt.shuffle_index[sample])
    (i_beg, off_beg), (i_end, off_end) = gpt.sample_index[j], gpt.sample_index[j + 1]
    spans = []
    for i in range(int(i_beg), int(i_end) + 1):
        doc = int(gpt.document_index[i])
        first = int(off_beg) if i == i_beg else 0
        stop = int(off_end) if i == i_end else int(gpt.dataset.sequence_lengths[doc])
        if stop > first:
            spans.append((doc, first, stop))
    return tuple(spans)


def tokens_of(samples: list[Span]) -> set[tuple[int, int]]:
    """Every (document, token position) the samples train."""
    return {(doc, t) for sample in samples for doc, first, stop in sample for t in range(first, stop)}


def phase_draws(
    prefixes: Sequence[str],
    weights: Sequence[float],
    phase_samples: int,
    seq_length: int,
    seed: int,
    workdir: str,
    surplus: float = 0.005,
) -> dict[str, list[Span]]:
    """Per prefix, the sample identities one phase trains, in training order (real builder)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    _ensure_gloo(workdir)
    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq_length,
        blend=(list(prefixes), [float(w) for w in weights]),
        split="100,0,0",
        tokenizer=_null_tokenizer(),
        path_to_cache=tempfile.mkdtemp(dir=workdir),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        mid_level_dataset_surplus=surplus,
    )
    train = BlendedMegatronDatasetBuilder(GPTDataset, [phase_samples, 0, 0], lambda: True, config).build()[0]
    draws: dict[str, list[Span]] = {p: [] for p in prefixes}
    for i in range(phase_samples):  # the loader of a fresh phase starts at sample 0
        j, s = int(train.dataset_index[i]), int(train.dataset_sample_index[i])
        draws[prefixes[j]].append(_identity(train.datasets[j], s))
    return draws


def epoch_identities(prefix: str, seq_length: int, seed: int, workdir: str) -> list[Span]:
    """Every sample of one epoch of ``prefix`` (a GPTDataset asked for 1 sample builds one epoch)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    _ensure_gloo(workdir)
    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq_length,
        blend=([prefix], None),
        split="100,0,0",
        tokenizer=_null_tokenizer(),
        path_to_cache=tempfile.mkdtemp(dir=workdir),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    gpt = BlendedMegatronDatasetBuilder(GPTDataset, [1, 0, 0], lambda: True, config).build()[0]
    return [_identity(gpt, int(s)) for s in range(len(gpt))]
