"""A merged NeoX config as a :class:`~neox_epoch.plan.inputs.PlanInput`: NeoX's semantics, its defaults where keys
are absent, the batch from :mod:`neox_epoch.batch.neox`, and the schedule keys a new train_iters touches.
"""

from __future__ import annotations

from neox_epoch.batch.config import LauncherSettings
from neox_epoch.batch.neox import NeoxBatch, neox_batch, neox_gas
from neox_epoch.errors import ConfigError
from neox_epoch.formats.neox_checks import check_attention_config, check_data_keys, check_types
from neox_epoch.formats.neox_config import (
    NeoxConfig,
    get_bool,
    get_float,
    get_int,
    get_paths,
    get_weights,
)
from neox_epoch.plan.inputs import NeoxOptions, PlanInput, SourceSpec
from neox_epoch.plan.schedule import NEOX_DECAY_STYLES, NeoxScheduleKeys
from neox_epoch.plan.seeds import check_seed


def plan_input_from_neox(
    cfg: NeoxConfig,
    world_size: int | None = None,
    gbs_override: int | None = None,
    launcher: LauncherSettings | None = None,
    batch: NeoxBatch | None = None,
) -> PlanInput:
    """Build a PlanInput from a merged NeoX config (NeoX semantics, its defaults where keys are absent).

    The batch comes first, as in NeoX (its ``calculate_derived`` runs before any other check): ``batch``
    when given, else :func:`neox_batch` for ``world_size`` / the launcher keys and ``launcher`` flags;
    ``gbs_override`` (``--global-batch-size``) replaces train_batch_size without a world.
    """
    if batch is None and not gbs_override:
        batch = neox_batch(cfg, world_size, launcher)
    check_attention_config(cfg)
    check_types(cfg)
    mbs = batch.micro_batch_size if batch else get_int(cfg, "train_micro_batch_size_per_gpu")
    gas = batch.gradient_accumulation_steps if batch else neox_gas(cfg)
    seq = get_int(cfg, "seq_length")
    if seq is None:
        raise ConfigError("seq_length: not set in any config file; NeoX requires it")
    train, valid, test, per_split = _neox_sources(cfg)
    split = cfg.values.get("split", "969, 30, 1")
    if not isinstance(split, str):
        raise ConfigError(f'{cfg.origin.get("split")}: split: expected a string such as "969,30,1", found {split!r}')
    train_iters, warmup_iters = _neox_iters(cfg)
    pack = cfg.values.get("pack_impl", "packed")
    if pack != "packed":
        raise ConfigError(
            f'{cfg.origin.get("pack_impl")}: pack_impl: {pack!r} is not planned; only "packed" is supported'
        )
    return PlanInput(
        framework="neox",
        framework_version="",
        seq_length=seq,
        global_batch_size=gbs_override or batch.train_batch_size,  # type: ignore[union-attr]
        train_sources=train,
        valid_sources=valid,
        test_sources=test,
        per_split_paths=per_split,
        split=split,
        train_iters=train_iters,
        eval_interval=get_int(cfg, "eval_interval", 1000) or 1000,
        eval_iters=get_int(cfg, "eval_iters", 100, positive=False) or 0,
        seed=check_seed(
            get_int(cfg, "seed", 1234, positive=False) or 0, f"{cfg.origin.get('seed', '<config>')}: seed", "GPT-NeoX"
        ),
        warmup_iters=warmup_iters,
        neox=_neox_options(cfg, mbs, gas),
    )


def _neox_sources(
    cfg: NeoxConfig,
) -> tuple[tuple[SourceSpec, ...], tuple[SourceSpec, ...], tuple[SourceSpec, ...], bool]:
    """The train, valid and test sources, and whether they come per split (train_data_paths) or from data_path."""
    check_data_keys(cfg)
    train_paths = get_paths(cfg, "train_data_paths")
    if train_paths:
        tw = get_weights(cfg, "train_data_weights", len(train_paths))
        vp, tp = get_paths(cfg, "valid_data_paths"), get_paths(cfg, "test_data_paths")
        vw, tsw = get_weights(cfg, "valid_data_weights", len(vp)), get_weights(cfg, "test_data_weights", len(tp))
        return (
            tuple(SourceSpec(p, w) for p, w in zip(train_paths, tw)),
            tuple(SourceSpec(p, w) for p, w in zip(vp, vw)),
            tuple(SourceSpec(p, w) for p, w in zip(tp, tsw)),
            True,
        )
    dp = cfg.values.get("data_path")
    if not dp:
        raise ConfigError("data_path: none of data_path or train_data_paths is set; point data_path at a prefix")
    if not isinstance(dp, str):
        raise ConfigError(f"{cfg.origin.get('data_path')}: data_path: expected one path prefix string, found {dp!r}")
    return (SourceSpec(dp),), (), (), False


def _neox_iters(cfg: NeoxConfig) -> tuple[int | None, int | None]:
    """train_iters and the warmup iterations NeoX derives from it (None without train_iters)."""
    train_iters = get_int(cfg, "train_iters")
    if train_iters is not None and get_int(cfg, "train_epochs") is not None and cfg.block is None:
        # NeoX's validate_train_epochs (with the neox_epoch block the plugin clears train_epochs before it runs)
        raise ConfigError(
            f"{cfg.origin.get('train_epochs', '<config>')}: train_epochs: given with train_iters "
            f'(in {cfg.origin.get("train_iters", "<config>")}); NeoX refuses both ("Cannot specify both '
            'train epochs and train iters simultaneously"): keep one of them'
        )
    warm = get_float(cfg, "warmup", 0.01)
    lr_decay = get_int(cfg, "lr_decay_iters") or train_iters
    warmup_iters = int(warm * lr_decay) if (warm is not None and lr_decay) else None
    return train_iters, warmup_iters if train_iters else None


def _neox_options(cfg: NeoxConfig, mbs: int | None, gas: int | None) -> NeoxOptions:
    """The NeoX-only plan options: blending, chopping, train_epochs, the batch split and the neox_epoch block."""
    bb = cfg.block.blend_buffer if cfg.block else None
    return NeoxOptions(
        weight_by_num_documents=get_bool(cfg, "weight_by_num_documents", False),
        weighted_sampler_alpha=get_float(cfg, "weighted_sampler_alpha", 1.0) or 1.0,
        blend_buffer=float(bb) if isinstance(bb, (int, float)) else None,
        allow_chopped=get_bool(cfg, "allow_chopped", True),
        train_epochs=get_int(cfg, "train_epochs"),
        micro_batch_size=mbs,
        gradient_accumulation_steps=gas or 1,
        separate_epochs=bool(cfg.block and cfg.block.separate_epochs),
    )


def schedule_keys(cfg: NeoxConfig) -> NeoxScheduleKeys:
    """The learning-rate, checkpoint, evaluation and exit keys a new train_iters touches (NeoX's defaults)."""

    def where(key: str) -> str:
        return f"{cfg.origin.get(key, '<config>')}: {key}"

    def choice(key: str, default: str, allowed: tuple[str, ...]) -> str:
        value = cfg.values.get(key)
        if value is None:
            return default
        if value not in allowed:
            raise ConfigError(f"{where(key)}: {value!r}; expected one of {list(allowed)}")
        return str(value)

    extra = cfg.values.get("extra_save_iters") or []
    if not isinstance(extra, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in extra):
        raise ConfigError(
            f"{where('extra_save_iters')}: {extra!r}; expected a list of iteration numbers, e.g. [0, 500]"
        )
    factor = get_float(cfg, "checkpoint_factor")
    if factor is not None and factor <= 0:
        raise ConfigError(f"{where('checkpoint_factor')}: {factor}; expected a number > 0")
    if factor is not None and factor.is_integer():
        factor = int(factor)
    return NeoxScheduleKeys(
        lr_decay_iters=get_int(cfg, "lr_decay_iters"),
        lr_decay_fraction=get_float(cfg, "lr_decay_fraction"),
        lr_decay_style=choice("lr_decay_style", "linear", NEOX_DECAY_STYLES),
        warmup=get_float(cfg, "warmup", 0.01) or 0.0,
        saves=bool(cfg.values.get("save")),
        checkpoint_factor=factor,
        checkpoint_scale=choice("checkpoint_scale", "linear", ("linear", "log")),
        extra_save_iters=tuple(extra),
        eval_interval=get_int(cfg, "eval_interval", 1000),
        eval_iters=get_int(cfg, "eval_iters", 100, positive=False) or 0,
        exit_interval=get_int(cfg, "exit_interval"),
        loads=bool(cfg.values.get("load")),
        use_checkpoint_lr_scheduler=bool(cfg.values.get("use_checkpoint_lr_scheduler", False)),
        train_epochs=get_int(cfg, "train_epochs"),
    )
