"""The hooks: wrappers set on NeoX's module globals, looked up by NeoX at call time.

=====================================================  =================================================
NeoX name (patched where NeoX looks it up)             what the wrapper does
=====================================================  =================================================
``megatron.training.build_train_valid_test_data_loaders``  plans the run (train_iters and the schedule keys
(and ``megatron.data.data_utils``'s)                   that follow it set before NeoX reads them, train_iters
                                                       checked equal on all ranks), runs NeoX's, then
                                                       logs the per-source table and the JSON record,
                                                       verifies the blend's draws, sets up the counters
``data_utils.get_normalized_weights_and_num_samples``  train split: 1.005 -> the block's buffer, or the
                                                       exact integer targets and their verified weights
``gpt2_dataset._build_index_mappings``                 records each build; ``separate_epochs``: builds an
                                                       epoch-separated index first (see ``index``)
``megatron.training.update_iterations``                keeps train_iters the planned value
``megatron.training.save_checkpoint``                  writes the data position into the checkpoint
                                                       (``resume_state``): a resume with another global
                                                       batch starts at the consumed samples
``megatron.training.training_log``                     live counters (O(1) per step)
``megatron.training.train``                            start/resume counters; final report (also when NeoX
                                                       stops early: ``exit_interval``, an error)
``megatron.training.shift_and_wrap_data_loaders``      the train iterator is guarded: NeoX's
                                                       ``itertools.cycle`` would replay the loader's first
                                                       batches once it is used up; the guard names the
                                                       iteration (``enforce``: :class:`WrapError`)
``GPT2Dataset.__getitem__`` / ``BlendableDataset``     ``enforce`` only: the silent ``idx % len`` wrap
``.__getitem__``                                       becomes :class:`WrapError`
=====================================================  =================================================
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from neox_epoch.neox.hook_build import after_build, prebuild_separated, staged_index, train_blend_request
from neox_epoch.neox.hook_plan import plan_for
from neox_epoch.neox.hook_resume import resumed_train_iterator, save_state, start_position
from neox_epoch.neox.hook_state import DatasetRecord, ReplayGuard, State, WrapError, set_arg
from neox_epoch.semantics import neox as neox_sem
from neox_epoch.semantics import neox_index


def make_wrappers(state: State) -> dict[tuple[str, str], Any]:
    """The replacement objects, keyed by (module, attribute)."""
    wrappers = {**_build_wrappers(state), **_loop_wrappers(state), **_checkpoint_wrappers(state)}
    if state.block.enforce:
        wrappers.update(_enforce_wrappers(state))
    return wrappers


def _build_wrappers(state: State) -> dict[tuple[str, str], Any]:
    """The data build: planning before it, the 1.005 replaced, separated indices, the table after it."""
    du, gd = state.modules["data_utils"], state.modules["gpt2_dataset"]
    real_build_loaders = du.build_train_valid_test_data_loaders
    real_normalize = du.get_normalized_weights_and_num_samples
    real_index = gd._build_index_mappings
    index_sig = inspect.signature(real_index)

    def build_train_valid_test_data_loaders(neox_args: Any, *args: Any, **kwargs: Any) -> Any:
        rp = plan_for(state, neox_args)
        state.in_build, state.normalize_calls, state.builds = True, 0, []
        try:
            loaders = real_build_loaders(neox_args, *args, **kwargs)
        finally:
            state.in_build = False
        after_build(state, rp, neox_args, loaders)
        return loaders

    def get_normalized_weights_and_num_samples(weights: Any, num_samples: Any) -> Any:
        role = ("train", "valid", "test")[state.normalize_calls % 3] if state.in_build else None
        if state.in_build:
            state.normalize_calls += 1
        rp = state.run
        if role != "train" or rp is None or num_samples is None:
            return real_normalize(weights, num_samples)
        state.blend_request = train_blend_request(state, rp, weights, num_samples)
        return list(state.blend_request[0]), list(state.blend_request[1])

    def _build_index_mappings(*args: Any, **kwargs: Any) -> Any:
        call = index_sig.bind(*args, **kwargs)
        call.apply_defaults()
        a = call.arguments
        documents = np.asarray(a["documents"])
        sizes = a["sizes"]
        tokens = int(np.sum(sizes[documents], dtype=np.int64))
        if state.resume is not None and str(a["name"]) in state.resume.state.builds:
            a["num_samples"] = state.resume.state.builds[str(a["name"])].num_samples  # the saved run's indices
        staged = state.run.staged if state.run is not None else None
        if staged is not None and str(a["name"]).startswith("train_"):
            return staged_index(state, staged, a, documents, sizes, tokens, real_index)
        epochs = a["num_epochs"] or neox_sem.num_epochs(tokens, a["seq_length"], a["num_samples"])
        separated = bool(
            state.block.separate_epochs
            and a["packing_impl"] == "packed"
            and str(a["name"]).startswith("train")
            and epochs > 1
        )
        if separated:
            a["name"] = str(a["name"]) + neox_index.NAME_SUFFIX
            prebuild_separated(state, a, documents, sizes, epochs)
        out = real_index(**a)
        state.builds.append(
            DatasetRecord(
                name=str(a["name"]),
                prefix=str(a["data_prefix"]),
                documents=int(documents.shape[0]),
                tokens=tokens,
                num_samples=a["num_samples"],
                epochs=int(epochs),
                samples_built=int(out[1].shape[0]) - 1,
                separated=separated,
            )
        )
        return out

    return {
        ("training", "build_train_valid_test_data_loaders"): build_train_valid_test_data_loaders,
        ("data_utils", "build_train_valid_test_data_loaders"): build_train_valid_test_data_loaders,
        ("data_utils", "get_normalized_weights_and_num_samples"): get_normalized_weights_and_num_samples,
        ("gpt2_dataset", "_build_index_mappings"): _build_index_mappings,
    }


def _loop_wrappers(state: State) -> dict[tuple[str, str], Any]:
    """The training loop: train_iters kept, counters stepped, the train iterator guarded."""
    tr = state.modules["training"]
    log_sig = inspect.signature(tr.training_log)
    shift_sig = inspect.signature(tr.shift_and_wrap_data_loaders)

    def update_iterations(neox_args: Any, data_loaders: Any) -> Any:
        out = state.original("training", "update_iterations")(neox_args, data_loaders)
        if state.run is not None and getattr(neox_args, "train_iters", None) != state.run.train_iters:
            set_arg(neox_args, "train_iters", state.run.train_iters)
        return out

    def training_log(*args: Any, **kwargs: Any) -> Any:
        out = state.original("training", "training_log")(*args, **kwargs)
        c = state.counters
        if c is not None:
            c.step(int(log_sig.bind(*args, **kwargs).arguments["iteration"]))
        return out

    def train(*args: Any, **kwargs: Any) -> Any:
        neox_args = kwargs.get("neox_args", args[0] if args else None)
        start_position(state, neox_args, int(getattr(neox_args, "iteration", 0) or 0))
        c = state.counters
        if c is not None:
            c.start(int(getattr(neox_args, "iteration", 0) or 0), state.resume.changed if state.resume else None)
        try:
            return state.original("training", "train")(*args, **kwargs)
        finally:  # also when NeoX stops at exit_interval (sys.exit inside its loop); NeoX keeps neox_args.iteration
            if c is not None:
                c.final(int(getattr(neox_args, "iteration", 0) or 0))
            state.sink.close()  # the log never stops training; what it could not write is named here

    def shift_and_wrap_data_loaders(*args: Any, **kwargs: Any) -> Any:
        call = shift_sig.bind(*args, **kwargs)
        call.apply_defaults()
        neox_args, loaders = call.arguments["neox_args"], call.arguments["data_loaders"]
        loader = loaders.get("train") if isinstance(loaders, dict) else None
        first = None
        if state.resume is not None and loader is not None:
            # NeoX shifts valid/test; the train loader starts at the consumed samples
            call.arguments["data_loaders"] = {**loaders, "train": None}
            _, valid_it, test_it = state.original("training", "shift_and_wrap_data_loaders")(*call.args, **call.kwargs)
            first, train_it = resumed_train_iterator(state.resume, loader, bool(call.arguments.get("loop", True)))
        else:
            train_it, valid_it, test_it = state.original("training", "shift_and_wrap_data_loaders")(*args, **kwargs)
        if train_it is not None and loader is not None:
            train_it = ReplayGuard(train_it, neox_args, len(loader), bool(state.block.enforce), first)
        return train_it, valid_it, test_it

    return {
        ("training", "update_iterations"): update_iterations,
        ("training", "training_log"): training_log,
        ("training", "train"): train,
        ("training", "shift_and_wrap_data_loaders"): shift_and_wrap_data_loaders,
    }


def _checkpoint_wrappers(state: State) -> dict[tuple[str, str], Any]:
    """NeoX's save_checkpoint, followed by the data position written into the checkpoint (``save_state``)."""
    save_sig = inspect.signature(state.modules["training"].save_checkpoint)

    def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
        out = state.original("training", "save_checkpoint")(*args, **kwargs)
        call = save_sig.bind(*args, **kwargs)
        save_state(state, call.arguments["neox_args"], int(call.arguments["iteration"]))
        return out

    return {("training", "save_checkpoint"): save_checkpoint}


def _enforce_wrappers(state: State) -> dict[tuple[str, str], Any]:
    gd, bd = state.modules["gpt2_dataset"], state.modules["blendable_dataset"]
    real_gpt = gd.GPT2Dataset.__getitem__
    real_blend = bd.BlendableDataset.__getitem__

    def gpt_getitem(self: Any, idx: Any) -> Any:
        i = int(idx)
        shuffle = getattr(self, "shuffle_idx", None)
        if shuffle is not None and (i >= shuffle.shape[0] or int(shuffle[i]) + 1 >= self.sample_idx.shape[0]):
            raise WrapError(
                f"{self.name}: sample {i} is past the end of its index ({len(self)} samples): NeoX would "
                "wrap it to idx % len (enforce is on); the run draws more than was built, replan it"
            )
        return real_gpt(self, idx)

    def blend_getitem(self: Any, idx: Any) -> Any:
        if int(idx) >= self.size:
            raise WrapError(
                f"blend: sample {int(idx)} is past the blend's end ({self.size} samples): NeoX would "
                "wrap it (enforce is on); the run draws more than was built, replan it"
            )
        return real_blend(self, idx)

    return {
        ("gpt2_dataset.GPT2Dataset", "__getitem__"): gpt_getitem,
        ("blendable_dataset.BlendableDataset", "__getitem__"): blend_getitem,
    }
