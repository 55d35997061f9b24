"""Where a resumed run starts drawing, and what that skips or repeats (GPT-NeoX's train loader).

GPT-NeoX's train loader draws its dataset in order, one loader batch of ``micro_batch * data_parallel``
samples at a time, ``gradient_accumulation_steps`` loader batches per iteration. At a resume NeoX does not
know how many samples were consumed: ``shift_and_wrap_data_loaders`` starts the loader at batch
``iteration * gradient_accumulation_steps % len(loader)``, in the *new* run's batch units. When the global
batch (micro batch, data parallelism or accumulation) changed, that is not where the old run stopped:

    consumed = sum over the old run's iterations of its train_batch_size      (where it stopped)
    start    = (iteration * gas_new % loader_batches_new) * micro_new * dp_new  (where NeoX resumes)

``start > consumed`` skips the samples in between (never trained), ``start < consumed`` trains those
samples again. With neox-epoch's hooks the start is ``consumed`` itself (rounded down to a whole loader
batch: the rest of that batch is repeated). Pure arithmetic on sample positions; which tokens those
samples hold is the audit's exposure computation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from neox_epoch.errors import ConfigError


@dataclass(frozen=True)
class LoaderShape:
    """How a NeoX run draws its train loader."""

    micro_batch: int
    """train_micro_batch_size_per_gpu."""
    data_parallel: int
    """Data-parallel ranks (GPUs / (model parallel x pipe parallel))."""
    gradient_accumulation: int
    """gradient_accumulation_steps: loader batches per iteration."""

    def __post_init__(self) -> None:
        for key in ("micro_batch", "data_parallel", "gradient_accumulation"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{key}: expected a whole number >= 1, found {value!r}")

    @property
    def loader_batch(self) -> int:
        """Samples in one loader batch (all data-parallel ranks together)."""
        return self.micro_batch * self.data_parallel

    @property
    def train_batch_size(self) -> int:
        """Samples per iteration."""
        return self.loader_batch * self.gradient_accumulation


@dataclass(frozen=True)
class ResumeStart:
    """Where the resumed run's train loader starts, against where the old run stopped."""

    consumed: int
    """Samples the old run drew (its position when it stopped)."""
    start: int
    """Position of the resumed run's first sample."""
    how: str
    """The arithmetic behind ``start``."""

    @property
    def skipped(self) -> tuple[int, int] | None:
        """Positions [lo, hi) never drawn: between where the old run stopped and where the new one starts."""
        return (self.consumed, self.start) if self.start > self.consumed else None

    @property
    def repeated(self) -> tuple[int, int] | None:
        """Positions [lo, hi) drawn again: the old run drew them and the new run starts before them."""
        return (self.start, self.consumed) if self.start < self.consumed else None


def loader_batches(dataset_samples: int, shape: LoaderShape) -> int:
    """``len(train_loader)``: whole loader batches in the dataset (NeoX's sampler drops the last partial one)."""
    return dataset_samples // shape.loader_batch


def neox_start(iteration: int, consumed: int, new: LoaderShape, dataset_samples: int) -> ResumeStart:
    """Where stock NeoX's resumed train loader starts (``shift_and_wrap_data_loaders``)."""
    batches = loader_batches(dataset_samples, new)
    if batches < 1:
        raise ConfigError(
            f"the train dataset has {dataset_samples} samples, fewer than one loader batch of "
            f"{new.loader_batch}; nothing can be drawn"
        )
    first = iteration * new.gradient_accumulation % batches
    how = (
        f"start = (iteration * gas % len(loader)) * micro * dp = ({iteration} * {new.gradient_accumulation} % "
        f"{batches}) * {new.micro_batch} * {new.data_parallel} = {first * new.loader_batch}"
    )
    return ResumeStart(consumed, first * new.loader_batch, how)


def hooked_start(consumed: int, new: LoaderShape) -> ResumeStart:
    """Where the resumed train loader starts under neox-epoch's hooks: the consumed samples, in whole loader
    batches (a partial last batch is drawn again from its first sample)."""
    first = consumed // new.loader_batch
    how = (
        f"start = consumed // (micro * dp) * (micro * dp) = {consumed} // {new.loader_batch} * "
        f"{new.loader_batch} = {first * new.loader_batch}"
    )
    return ResumeStart(consumed, first * new.loader_batch, how)


#: positions [lo, hi) of a dataset, drawn ``times`` times
Span = tuple[int, int, int]


def cycle_spans(first: int, count: int, lo: int, hi: int) -> tuple[Span, ...]:
    """``count`` positions drawn in order from ``first``, back to ``lo`` after ``hi - 1``, as spans. NeoX wraps its
    loaders in ``itertools.cycle``, which replays the first pass: a loader resumed at ``lo`` never draws
    ``0..lo-1`` again in that launch."""
    if count <= 0 or hi <= lo:
        return ()
    head = min(count, hi - first)
    whole, rest = divmod(count - head, hi - lo)
    spans = ((first, first + head, 1), (lo, hi, whole), (lo, lo + rest, 1))
    return tuple(s for s in spans if s[1] > s[0] and s[2] > 0)


@dataclass(frozen=True)
class ValidSource:
    """One source of a blended validation dataset: its samples among the evaluations' draws."""

    name: str
    drawn_before: int  # Among the saved run's evaluations' draws.
    resumed: int  # Among the draws of the resumed run's evaluations, from its start to the end of the run.
    continued: int  # Among as many draws continuing after the saved run's.


@dataclass(frozen=True)
class ValidStart:
    """Where the resumed run's validation loader starts, against what the saved run's evaluations drew (samples
    of the validation dataset; evaluation trains nothing, so a difference changes only which samples the
    validation loss is measured on)."""

    drawn: int
    """Validation samples the saved run's evaluations drew by its iteration."""
    start: int
    """Where NeoX's resumed validation loader starts."""
    continued: int
    """Where it would continue after the saved run's evaluations (``drawn``, wrapped as the loader wraps)."""
    how: str
    """The arithmetic behind both."""
    sources: tuple[ValidSource, ...] = ()
    """Per source of the validation blend (empty when not computed)."""
    spans: tuple[tuple[Span, ...], ...] = ()
    """The dataset positions of the saved run's evaluations, the resumed run's and as many continuing (GPT-NeoX;
    empty when the run's end is not given): what ``sources`` counts per source."""

    @property
    def replayed(self) -> tuple[int, int] | None:
        """GPT-NeoX: positions [lo, hi) the resumed evaluations draw again after reaching the dataset's end: the
        loader's cycle replays from its start ``lo`` > 0, never 0..lo-1. None when they do not reach it (or start
        at 0, where the cycle wraps as continuing would)."""
        resumed = self.spans[1] if len(self.spans) == 3 else ()
        return (self.start, max(hi for _, hi, _ in resumed[1:])) if self.start and len(resumed) > 1 else None


def evaluations_after(iteration: int, end: int, interval: int) -> int:
    """Evaluations of the validation set in a launch resumed at ``iteration`` that ends at ``end`` (GPT-NeoX and
    Megatron-LM alike): one at each multiple of ``eval_interval`` after ``iteration`` (none when it is 0) and one
    after the last iteration."""
    return (max(0, end // interval - iteration // interval) if interval else 0) + 1


def neox_valid_start(
    iteration: int,
    old: LoaderShape,
    old_eval: tuple[int, int],
    new: LoaderShape,
    new_eval: tuple[int, int],
    valid_samples: int,
    end: int | None = None,
    old_valid_samples: int | None = None,
) -> ValidStart | None:
    """NeoX evaluates every ``eval_interval`` iterations, ``eval_iters`` times ``gradient_accumulation_steps``
    loader batches (``evaluate``), after the checkpoint of the same iteration is saved; the resumed loader starts
    at ``((iteration * gas) // eval_interval) * eval_iters % len(loader)`` batches (``shift_and_wrap_data_loaders``).
    ``*_eval``: (eval_interval, eval_iters). With the resumed run's ``end`` iteration, also the positions each
    evaluation draws (``spans``): the saved run's from 0 in one launch over its validation dataset
    (``old_valid_samples``, else the new one's), the resumed run's from its start, as many continuing. None without
    evaluation or a validation dataset."""
    (old_interval, old_iters), (new_interval, new_iters) = old_eval, new_eval
    batches = valid_samples // new.loader_batch
    if min(old_interval, new_interval, old_iters, new_iters, batches) < 1:
        return None
    size = batches * new.loader_batch
    old_size = (old_valid_samples or valid_samples) // old.loader_batch * old.loader_batch or size
    drawn = iteration // old_interval * old_iters * old.gradient_accumulation * old.loader_batch
    first = iteration * new.gradient_accumulation // new_interval * new_iters % batches * new.loader_batch
    how = (
        f"drawn = (iteration // eval_interval) * eval_iters * gas * micro * dp = ({iteration} // {old_interval}) * "
        f"{old_iters} * {old.gradient_accumulation} * {old.loader_batch} = {drawn}; start = ((iteration * gas) // "
        f"eval_interval) * eval_iters % len(loader) * micro * dp = (({iteration} * {new.gradient_accumulation}) // "
        f"{new_interval}) * {new_iters} % {batches} * {new.loader_batch} = {first}"
    )
    valid = ValidStart(drawn, first, drawn % old_size, how)
    if end is None:
        return valid
    evaluations = evaluations_after(iteration, end, new_interval)
    count = evaluations * new_iters * new.gradient_accumulation * new.loader_batch
    how += (
        f"; the resumed run's evaluations draw (end // eval_interval - iteration // eval_interval + 1) * "
        f"eval_iters * gas * micro * dp = ({end} // {new_interval} - {iteration} // {new_interval} + 1) * "
        f"{new_iters} * {new.gradient_accumulation} * {new.loader_batch} = {count} samples"
    )
    if first and first + count > size:
        how += (
            f" from {first}: past sample {size - 1} (len(loader) * micro * dp = {batches} * {new.loader_batch}) "
            f"itertools.cycle replays the launch's first pass from sample {first}"
        )
    spans = (
        cycle_spans(0, drawn, 0, old_size),
        cycle_spans(first, count, first, size),
        cycle_spans(valid.continued, count, 0, old_size),
    )
    return replace(valid, how=how, spans=spans)


@dataclass(frozen=True)
class EndTest:
    """The test loader at the resume: GPT-NeoX and Megatron-LM start it at sample 0 in every launch and evaluate it
    once, after the last iteration, so the resumed run tests on what continuing unchanged would (given the same
    eval_iters and batch)."""

    samples: int
    """Samples the evaluation after the last iteration draws: eval_iters x the global batch."""
    how: str
    """The arithmetic and where it comes from."""


def end_test(eval_iters: int, train_batch_size: int, test_samples: int, framework: str) -> EndTest | None:
    """None without a test dataset or test evaluation."""
    if eval_iters < 1 or test_samples < 1:
        return None
    drawn = min(eval_iters * train_batch_size, test_samples)
    return EndTest(
        drawn,
        f"{framework} starts the test loader at sample 0 in every launch and evaluates it after the "
        f"last iteration: samples 0..{drawn - 1} (eval_iters * global batch = {eval_iters} * "
        f"{train_batch_size}): the same start as continuing unchanged",
    )
