"""Pure batch arithmetic: DeepSpeed's (and NeoX's) derivation rules checked against a world size.

Mirrors ``DeepSpeedConfig._set_batch_related_parameters`` / ``_batch_assertion`` (DeepSpeed 0.19) and
NeoX's ``calculate_batch_parameters`` (same rules; gradient_accumulation_steps defaults to 1 there):

====================  ================================================
given                 derived
====================  ================================================
tbs, mbs, gas         used as given, then asserted
tbs + mbs             gas = tbs // mbs // dp
tbs + gas             mbs = tbs // dp // gas
mbs + gas             tbs = mbs * gas * dp
tbs only              gas = 1, mbs = tbs // dp
mbs only              tbs = mbs * dp, gas = 1
====================  ================================================

then ``tbs > 0``, ``mbs > 0``, ``gas > 0`` and ``tbs == mbs * gas * dp``. Integer division floors
silently, so a wrong world shows up as an assertion (or ``gas = 0``) only inside ``deepspeed.initialize``.
No I/O, no framework imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from neox_epoch.batch.config import BatchConfig, deepspeed_keys_sent
from neox_epoch.errors import BatchError, ConfigError

#: top-level keys DeepSpeed 0.19 rejects with DeepSpeedConfigError, even when false or null
REMOVED_TOP_LEVEL_KEYS: tuple[str, ...] = (
    "nebula",
    "compression_training",
    "amp",
    "quantize_training",
    "sparse_gradients",
    "eigenvalue",
    "sparse_attention",
    "elasticity",
    "graph_harvesting",
    "curriculum_learning",
    "progressive_layer_drop",
)
#: ``zero_optimization`` sub-keys DeepSpeed 0.19 rejects
REMOVED_ZERO_KEYS: tuple[str, ...] = ("mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param")


@dataclass(frozen=True, kw_only=True, slots=True)
class Batch:
    """The three batch numbers after the derivation rules ran for one data-parallel size."""

    train_batch_size: int
    """Global batch (samples per optimizer step)."""
    train_micro_batch_size_per_gpu: int
    """Samples per data-parallel rank per forward/backward."""
    gradient_accumulation_steps: int
    """Micro batches per optimizer step."""
    data_parallel_size: int
    """The dp the rules were applied with (DeepSpeed's "world_size")."""
    derived: str = ""
    """The derivation with its numbers (``gas = tbs // mbs // dp = 32 // 4 // 4 = 2``); empty if all given."""

    def product(self) -> int:
        """``micro * grad_accum * dp``."""
        return self.train_micro_batch_size_per_gpu * self.gradient_accumulation_steps * self.data_parallel_size

    def equation(self) -> str:
        """``train_batch_size = micro * grad_accum * dp = 4 * 2 * 4 = 32`` (``!=`` when it does not hold)."""
        m, g, dp = self.train_micro_batch_size_per_gpu, self.gradient_accumulation_steps, self.data_parallel_size
        if self.train_batch_size == self.product():
            return f"train_batch_size = micro * grad_accum * dp = {m} * {g} * {dp} = {self.product()}"
        return (
            f"train_batch_size {self.train_batch_size} != micro * grad_accum * dp = {m} * {g} * {dp} = {self.product()}"
        )


@dataclass(frozen=True, kw_only=True)
class BatchReport:
    """Everything check-batch found for one config and one launcher world."""

    flavor: str
    """``neox`` or ``deepspeed`` (whose derivation rules were applied first)."""
    world_size: int
    """Processes the launcher starts."""
    neox_world_size: int | None
    """NeoX's ``global_num_gpus`` (NeoX configs only)."""
    pipe_parallel_size: int
    """Pipeline stages (>= 1)."""
    model_parallel_size: int
    """Tensor/model parallel size (>= 1)."""
    sequence_parallel_size: int
    """DeepSpeed Ulysses sequence parallel size (1 unless set in a DeepSpeed JSON)."""
    data_parallel_size: int
    """``world / (pp * mp * sp)`` for the launcher's world."""
    batch: Batch
    """What DeepSpeed in the workers will use (after NeoX's hand-off for NeoX configs)."""
    neox_batch: Batch | None
    """What NeoX derives with its own GPU count (NeoX configs whose count differs from the launcher's)."""
    arithmetic: tuple[str, ...]
    """The arithmetic, one line each, for the table."""
    findings: tuple[str, ...]
    """Each disagreement, with the numbers and the reason; empty when consistent."""

    @property
    def consistent(self) -> bool:
        """True when the launcher's world, NeoX's count and the batch keys all agree."""
        return not self.findings


def _dp_formula(sp: int) -> str:
    return "world / (pp * mp * sp)" if sp != 1 else "world / (pp * mp)"


def _dp_factors(pp: int, mp: int, sp: int) -> str:
    return f"({pp} * {mp} * {sp})" if sp != 1 else f"({pp} * {mp})"


def data_parallel_size(
    world_size: int, pipe_parallel_size: int = 1, model_parallel_size: int = 1, sequence_parallel_size: int = 1
) -> int:
    """``world / (pp * mp * sp)``; raises :class:`BatchError` when it is not a whole, positive number."""
    pp, mp, sp = pipe_parallel_size, model_parallel_size, sequence_parallel_size
    divisor = pp * mp * sp
    if world_size > 0 and world_size % divisor == 0:
        return world_size // divisor
    names = "pipe_parallel_size * model_parallel_size" + (" * sequence_parallel_size" if sp != 1 else "")
    divisors = [d for d in range(1, world_size + 1) if world_size % d == 0]
    raise BatchError(
        f"dp = {_dp_formula(sp)} = {world_size} / {_dp_factors(pp, mp, sp)} = {world_size / divisor:.3g} is not a "
        f"whole number: the launcher starts {world_size} processes and {names} = {divisor} does not divide it; "
        f"choose {names} among {divisors} or launch a multiple of {divisor} processes"
    )


def derive_batch(train_batch_size: int | None, micro_batch: int | None, grad_acc: int | None, dp: int) -> Batch:
    """Apply DeepSpeed's ``_set_batch_related_parameters`` for data-parallel size ``dp`` (> 0)."""
    tbs, mbs, gas = train_batch_size, micro_batch, grad_acc
    if tbs is not None and mbs is not None and gas is not None:
        return Batch(
            train_batch_size=tbs,
            train_micro_batch_size_per_gpu=mbs,
            gradient_accumulation_steps=gas,
            data_parallel_size=dp,
        )
    if tbs is not None and mbs is not None:
        gas = tbs // mbs // dp
        rule = f"gradient_accumulation_steps = train_batch_size // micro // dp = {tbs} // {mbs} // {dp} = {gas}"
    elif tbs is not None and gas is not None:
        mbs = tbs // dp // gas
        rule = f"micro = train_batch_size // dp // grad_accum = {tbs} // {dp} // {gas} = {mbs}"
    elif mbs is not None and gas is not None:
        tbs = mbs * gas * dp
        rule = f"train_batch_size = micro * grad_accum * dp = {mbs} * {gas} * {dp} = {tbs}"
    elif tbs is not None:
        gas, mbs = 1, tbs // dp
        rule = f"grad_accum = 1, micro = train_batch_size // dp = {tbs} // {dp} = {mbs}"
    elif mbs is not None:
        tbs, gas = mbs * dp, 1
        rule = f"grad_accum = 1, train_batch_size = micro * dp = {mbs} * {dp} = {tbs}"
    else:
        raise ConfigError(
            "neither train_batch_size nor train_micro_batch_size_per_gpu is set; "
            "DeepSpeed needs at least one of them; set train_batch_size"
        )
    return Batch(
        train_batch_size=tbs,
        train_micro_batch_size_per_gpu=mbs,
        gradient_accumulation_steps=gas,
        data_parallel_size=dp,
        derived=rule,
    )


def batch_errors(batch: Batch, who: str = "DeepSpeed") -> list[str]:
    """DeepSpeed's ``_batch_assertion`` checks that fail, in its order (it raises the first), explained.

    NeoX's ``check_batch_parameters`` makes the same checks with the same messages; ``who`` names the one
    that stops (``"NeoX"`` for a NeoX config checked with NeoX's own GPU count).
    """
    errors = []
    how = f" ({batch.derived})" if batch.derived else ""
    if batch.train_batch_size <= 0:
        errors.append(
            f"train_batch_size rounds to {batch.train_batch_size}{how}; {who} stops: "
            f"'Train batch size: {batch.train_batch_size} has to be greater than 0'"
        )
    if batch.train_micro_batch_size_per_gpu <= 0:
        errors.append(
            f"train_micro_batch_size_per_gpu rounds to {batch.train_micro_batch_size_per_gpu}{how}; "
            f"{who} stops: 'Micro batch size per gpu: {batch.train_micro_batch_size_per_gpu} has to "
            "be greater than 0'"
        )
    if batch.gradient_accumulation_steps <= 0:
        errors.append(
            f"gradient_accumulation_steps rounds to {batch.gradient_accumulation_steps}{how}; "
            f"{who} stops: 'Gradient accumulation steps: {batch.gradient_accumulation_steps} has to "
            "be greater than 0'"
        )
    if not errors and batch.train_batch_size != batch.product():
        floors = f" ({batch.derived} floors)" if batch.derived else ""
        errors.append(
            f"{batch.equation()}{floors}; {who} stops: 'Check batch related parameters. "
            "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size'"
        )
    return errors


def check_removed_keys(
    config: BatchConfig,
    *,
    removed: Mapping[str, str] | None = None,
    removed_zero: Mapping[str, str] | None = None,
    deepspeed_version: str = "0.19",
) -> None:
    """Raise :class:`ConfigError` for a key the installed DeepSpeed rejects (``DeepSpeedConfigError``).

    ``removed``/``removed_zero`` map key -> DeepSpeed's own message (defaults: the 0.19 lists, no
    message). For NeoX configs only keys that reach DeepSpeed count (see ``deepspeed_keys_sent``).
    """
    top = removed if removed is not None else dict.fromkeys(REMOVED_TOP_LEVEL_KEYS, "")
    zero = removed_zero if removed_zero is not None else dict.fromkeys(REMOVED_ZERO_KEYS, "")
    sent = deepspeed_keys_sent(config)
    for key, message in top.items():
        if key in sent:
            said = f' ("{message.strip()}")' if message else ""
            raise ConfigError(
                f'config key "{key}" {config.where(key)} is rejected by DeepSpeed {deepspeed_version}{said}; '
                f'expected no "{key}" key; remove it'
            )
    zero_config = sent.get("zero_optimization")
    if isinstance(zero_config, Mapping):
        for key, message in zero.items():
            if key in zero_config:
                said = f' ("{message.strip()}")' if message else ""
                raise ConfigError(
                    f'config key "zero_optimization.{key}" {config.where("zero_optimization")} is rejected by '
                    f'DeepSpeed {deepspeed_version}{said}; expected no "{key}" key; remove it'
                )


def check_batch(
    config: BatchConfig, world_size: int, *, neox_world_size: int | None = None, world_disagreement: str = ""
) -> BatchReport:
    """Check ``config`` against the launcher's ``world_size`` (and NeoX's own count for NeoX configs).

    Raises :class:`BatchError` when dp is not a whole number for the launcher's world (no batch
    setting can fix that). Everything else that would stop or silently change the run is a finding.
    ``world_disagreement`` is the sentence explaining why NeoX's count differs (from the world module).
    """
    pp, mp, sp = config.pipe_parallel_size, config.model_parallel_size, config.sequence_parallel_size
    dp = data_parallel_size(world_size, pp, mp, sp)
    tbs, mbs, gas = config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps
    lines = [f"dp = {_dp_formula(sp)} = {world_size} / {_dp_factors(pp, mp, sp)} = {dp}"]
    neox_batch: Batch | None = None
    neox_world = neox_world_size if config.flavor == "neox" and neox_world_size is not None else world_size

    if config.flavor == "deepspeed" or neox_world == world_size:
        batch = derive_batch(tbs, mbs, gas, dp)
        findings = batch_errors(batch)
    else:
        neox_batch, neox_lines, neox_findings = _neox_own_batch(config, neox_world)
        lines += neox_lines
        findings = [
            world_disagreement or f"NeoX counted {neox_world} GPUs while the launcher starts {world_size}",
            *neox_findings,
        ]
        if neox_batch is not None and not neox_findings:
            batch, worker_findings = _workers_batch(neox_batch, dp)
            findings += worker_findings
        else:
            batch = derive_batch(tbs, mbs, gas, dp)
            findings += [f"with the launcher's dp {dp}: {e}" for e in batch_errors(batch)]
    if batch.derived:
        lines.append(batch.derived)
    lines.append(batch.equation())
    return BatchReport(
        flavor=config.flavor,
        world_size=world_size,
        neox_world_size=neox_world if config.flavor == "neox" else None,
        pipe_parallel_size=pp,
        model_parallel_size=mp,
        sequence_parallel_size=sp,
        data_parallel_size=dp,
        batch=batch,
        neox_batch=neox_batch,
        arithmetic=tuple(lines),
        findings=tuple(findings),
    )


def neox_dp(global_num_gpus: int, pp: int, mp: int, counted: str = "") -> int:
    """NeoX's dp = (global_num_gpus / pp) / mp (``calculate_derived``); BatchError, in one wording for plan,
    resume-check and check-batch, unless it is a whole number. ``counted`` says how NeoX counted the GPUs."""
    g = global_num_gpus
    if g % (pp * mp):
        raise BatchError(
            f"dp = global_num_gpus / (pipe_parallel_size * model_parallel_size) = {g} / ({pp} * {mp}) = "
            f"{g / (pp * mp):g} is not a whole number{f' (NeoX counts {g} GPUs {counted})' if counted else ''}; "
            f"NeoX stops: '(global_num_gpus / pp_size) / mp_size must be a whole number': run on a multiple of "
            f"{pp * mp} GPUs or change model_parallel_size / pipe_parallel_size"
        )
    return g // (pp * mp)


def _neox_own_batch(config: BatchConfig, neox_world: int) -> tuple[Batch | None, list[str], list[str]]:
    """NeoX's derivation with its own GPU count: its batch (None when its dp is not whole), arithmetic, findings."""
    pp, mp = config.pipe_parallel_size, config.model_parallel_size
    line = f"NeoX: dp = global_num_gpus / (pp * mp) = {neox_world} / ({pp} * {mp}) = {neox_world / (pp * mp):.3g}"
    if neox_world <= 0:
        return (
            None,
            [line],
            [
                f"NeoX stops before launching: with global_num_gpus {neox_world} its dp is 0 and "
                "train_batch_size = micro * grad_accum * 0 cannot hold"
            ],
        )
    try:
        ndp = neox_dp(neox_world, pp, mp)
    except BatchError as err:
        return None, [line], [f"NeoX stops before launching: {err}"]
    neox_batch = derive_batch(
        config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps, ndp
    )
    lines = [f"NeoX: dp = global_num_gpus / (pp * mp) = {neox_world} / ({pp} * {mp}) = {ndp}"]
    if neox_batch.derived:
        lines.append(f"NeoX: {neox_batch.derived}")
    lines.append(f"NeoX: {neox_batch.equation()}")
    return neox_batch, lines, [f"NeoX stops before launching (dp {ndp}): {e}" for e in batch_errors(neox_batch)]


def _workers_batch(neox_batch: Batch, dp: int) -> tuple[Batch, list[str]]:
    """What DeepSpeed in the workers derives from NeoX's values on the launcher's ``dp``, and what goes wrong."""
    # deepy sends tbs and mbs always, gas only when it differs from NeoX's default 1
    sent_gas = neox_batch.gradient_accumulation_steps
    batch = derive_batch(
        neox_batch.train_batch_size, neox_batch.train_micro_batch_size_per_gpu, None if sent_gas == 1 else sent_gas, dp
    )
    errors = batch_errors(batch)
    findings = [f"DeepSpeed in the workers (dp {dp}) gets NeoX's values and stops: {e}" for e in errors]
    if not errors and batch.gradient_accumulation_steps != sent_gas:
        findings.append(
            f"DeepSpeed in the workers silently re-derives {batch.derived} on the launcher's dp {dp}, "
            f"while NeoX's training loop uses gradient_accumulation_steps {sent_gas}: each NeoX iteration "
            f"would consume {batch.train_micro_batch_size_per_gpu * sent_gas * dp} samples, not "
            f"train_batch_size {batch.train_batch_size}, and the planned iterations would be wrong"
        )
    return batch, findings
