"""Legacy Megatron-LM ``megatron/data/gpt_dataset.py`` semantics (before megatron-core, Oct 2023).

Mirrors, from the public source: the split string rounding of ``get_train_valid_test_split_`` (the same
as NeoX's), ``_num_epochs`` ((E*T - 1) // L >= N), samples built ``(E*T - 1) // L``, ``len`` =
``sample_idx.shape[0] - 1`` (= samples built), the 80% separate-last-epoch rule, and blends asking each
source for ``ceil(N * w_i * 1.005)`` with a BlendableDataset of size = the sum of those requests.
Not run here (legacy Megatron-LM is not installable from a package index); treat as documented, not verified.
"""

from __future__ import annotations

from neox_epoch.semantics import DatasetBuild, neox

FRAMEWORK = "megatron-legacy"
split_boundaries = neox.split_boundaries
normalized_weights_and_num_samples = neox.normalized_weights_and_num_samples


def build(tokens: int, seq_length: int, num_samples: int | None) -> DatasetBuild:
    """Mirror legacy ``_build_index_mappings``: NeoX's epoch count plus the 80% final-epoch rule."""
    base = neox.build(tokens, seq_length, num_samples if num_samples is not None else 0, None)
    separate = False
    note = ""
    if base.epochs > 1 and num_samples is not None:
        sans_final = ((base.epochs - 1) * tokens - 1) // seq_length
        from_final = num_samples - sans_final
        separate = from_final < int(0.80 * base.samples_per_epoch)
        note = f"; final epoch {from_final} samples vs int(0.80 * {base.samples_per_epoch}) -> " + (
            "separate" if separate else "joint"
        )
    return DatasetBuild(
        tokens=base.tokens,
        samples_per_epoch=base.samples_per_epoch,
        samples_requested=num_samples,
        epochs=base.epochs,
        samples_built=base.samples_built,
        length=base.samples_built,
        separate_final_epoch=separate,
        formula=base.formula.split("; len")[0] + f"; len = samples = {base.samples_built}" + note,
    )
