"""``neox-epoch audit``: what an existing index cache really feeds the model.

Reads GPT-NeoX and megatron-core (and legacy Megatron-LM) index caches next to the data or in a cache
directory, checks them against the .bin/.idx they were built from, and, given how far training went,
counts how many times each document and token was an input. numpy only: no torch import.

Modules, bottom up: ``findings`` (what a damaged file turns into), ``names`` (recognize and group cache
file names), ``npy`` (bounded reads of .npy files), ``descriptions`` (megatron-core description.txt,
legacy .dsc), ``consumption`` (which dataset indices training drew), ``validate`` (one streamed pass
over an index), ``exposure`` (per-token and per-document counts), ``blends`` (blend pairs and per-source
passes), ``audit`` (orchestration), ``report`` (table, JSON, plot, manifest), ``cli``.
"""
