"""What a plan is asked: the run's common numbers plus one options class per framework.

:class:`PlanInput` holds what every framework has (sequence length, batch, iterations, sources, split,
evaluation); :class:`NeoxOptions` and :class:`McoreOptions` hold what only GPT-NeoX or megatron-core
reads. :class:`PlanWarning` is one structured warning of a plan (the hooks filter them by ``code``).
Pure dataclasses: no I/O, no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from neox_epoch.semantics.mcore import DEFAULT_SURPLUS


@dataclass(frozen=True)
class SourceSpec:
    """One tokenized source: a .bin/.idx prefix, its display name and its blend weight."""

    prefix: str
    """Path prefix of the .bin/.idx pair."""
    weight: float | None = None
    """Blend weight as written in the config (None: no weight given)."""
    name: str = ""
    """Display name (default: the prefix's basename)."""

    @property
    def label(self) -> str:
        return self.name or os.path.basename(self.prefix)


@dataclass(frozen=True)
class NeoxOptions:
    """Settings only GPT-NeoX (and legacy Megatron-LM, which shares its data code) reads."""

    blend_buffer: float | None = None
    """Per-source request factor in train_data_paths mode; None = NeoX's 1.005 (neox_epoch replaces it)."""
    exact_requests: tuple[int, ...] | None = None
    """Per train source, the exact num_samples the neox_epoch hooks request (exact mode)."""
    weight_by_num_documents: bool = False
    """NeoX weight_by_num_documents: blend weights from document counts."""
    weighted_sampler_alpha: float = 1.0
    """NeoX weighted_sampler_alpha (with weight_by_num_documents)."""
    pack_impl: str = "packed"
    """NeoX pack_impl (only 'packed' is planned)."""
    allow_chopped: bool = True
    """NeoX allow_chopped (part of the index cache file name)."""
    train_epochs: int | None = None
    """NeoX train_epochs: datasets built for one epoch, train_iters = len(loader) * train_epochs // gas."""
    micro_batch_size: int | None = None
    """train_micro_batch_size_per_gpu (train_epochs mode: the loader's batch is micro * dp)."""
    gradient_accumulation_steps: int = 1
    """gradient_accumulation_steps (train_epochs mode divides the loader length by it)."""
    separate_epochs: bool = False
    """neox_epoch.separate_epochs: the hooks shuffle every epoch on its own (no cross-epoch spillover)."""


@dataclass(frozen=True)
class McoreOptions:
    """Settings only megatron-core's builder (and Megatron-LM's training loop around it) reads."""

    mid_level_dataset_surplus: float = DEFAULT_SURPLUS
    """megatron-core >= 0.13.1 mid-level buffer (--mid-level-dataset-surplus)."""
    add_extra_token_to_sequence: bool = True
    """Each sample holds seq_length + 1 tokens (GPTDatasetConfig.add_extra_token_to_sequence)."""
    renormalize_blend_weights: bool = False
    """megatron-core <= 0.10 renormalize_blend_weights."""
    num_samples: tuple[int | None, int | None, int | None] | None = None
    """Samples Megatron-LM asks the builder for per split (get_train_valid_test_num_samples); None: the
    NeoX-style formula from train_iters, eval_interval and eval_iters."""
    train_consumed: int | None = None
    """Samples training draws in train_iters iterations when that is not train_iters * global batch (a
    batch-size ramp-up or step schedule); None: train_iters * global_batch_size."""
    eval_global_batch_size: int | None = None
    """Megatron-LM 0.19.2's evaluation batch (--eval-global-batch-size, default the global batch) for the valid
    and test samples when ``num_samples`` is None (exact mode); None: the global batch."""
    start_eval_at_iter: int | None = None
    """Megatron-LM 0.19.2's --start-eval-at-iter: evaluations before it are not requested (exact mode)."""
    arithmetic: tuple[str, ...] | None = None
    """Megatron-LM's own lines for the samples requested and consumed per split (with the version whose
    arithmetic they follow), in place of the train_iters * global batch lines; None: those lines."""


@dataclass(frozen=True)
class PlanInput:
    """Everything the plan needs. Common fields here, framework-only ones in ``neox`` / ``mcore``."""

    framework: str
    """'neox', 'megatron-core' or 'megatron-legacy': whose semantics to mirror."""
    framework_version: str
    """Version whose semantics apply (megatron-core: buffer rules differ by version; NeoX: the commit)."""
    seq_length: int
    """Tokens per sample (NeoX seq_length, Megatron --seq-length)."""
    global_batch_size: int
    """Samples per iteration: NeoX train_batch_size, Megatron --global-batch-size."""
    train_sources: tuple[SourceSpec, ...]
    """Sources of the train split (data_path/--data-path, or train_data_paths)."""
    valid_sources: tuple[SourceSpec, ...] = ()
    """Per-split sources (NeoX valid_data_paths, Megatron --valid-data-path); empty with a split string."""
    test_sources: tuple[SourceSpec, ...] = ()
    """Per-split sources (NeoX test_data_paths, Megatron --test-data-path)."""
    per_split_paths: bool = False
    """True for NeoX train_data_paths mode / Megatron blend_per_split; False for data_path + split."""
    split: str | None = "969,30,1"
    """Split string for data_path mode (NeoX default "969,30,1")."""
    train_iters: int | None = None
    """Iterations to train (None: computed in exact mode, from train_samples, or from train_epochs)."""
    train_samples: int | None = None
    """Megatron --train-samples (train_iters = train_samples // global_batch_size)."""
    eval_interval: int = 1000
    """Iterations between evaluations."""
    eval_iters: int = 10
    """Iterations per evaluation (0: no evaluation)."""
    seed: int = 1234
    """Data shuffling seed."""
    blend_weights_override: tuple[float, ...] | None = None
    """Per train source, blend weights set by an exact plan (replaces the config's weights)."""
    warmup_iters: int | None = None
    """Learning-rate warmup iterations, checked against the run length."""
    warmup_share_limit: float = 0.1
    """Warn when warmup exceeds this share of train_iters."""
    neox: NeoxOptions = field(default_factory=NeoxOptions)
    """GPT-NeoX-only settings."""
    mcore: McoreOptions = field(default_factory=McoreOptions)
    """megatron-core-only settings."""


@dataclass(frozen=True)
class PlanWarning:
    """One warning of a plan: a stable ``code`` to filter on, where it applies, and the text for people."""

    code: str
    """Stable identifier, e.g. ``spillover``, ``oversampled``, ``valid-passes``, ``warmup``, ``cache-stale``."""
    text: str
    """The whole message, as printed."""
    split: str | None = None
    """'train', 'valid' or 'test' when it concerns one split."""
    source: str | None = None
    """The source's display name when it concerns one source."""

    def __str__(self) -> str:
        return self.text

    def to_json(self) -> dict[str, str | None]:
        return {"code": self.code, "split": self.split, "source": self.source, "text": self.text}
