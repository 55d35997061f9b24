"""neox-epoch: make "train for exactly N passes over my data" true, visible and checkable.

Layers, each importing only those listed before it (the README's Layout): ``util``, ``semantics`` (the
frameworks' arithmetic, pure), ``formats`` (what the frameworks write, read torch-free), ``batch``, ``audit``,
``plan``, the framework adapters ``mcore``, ``neox`` and ``megatron_lm``, then ``resume`` and ``run_report``;
``cli`` dispatches to each command's module by name. Everything but the adapters' run-time hooks imports numpy
and pyyaml only, never torch.
"""

__version__ = "0.1.0"
