"""Megatron-LM adapter: `neox-epoch launch` on a Megatron-LM line, the hooks each rank installs
(docs/megatron-lm.md)."""
