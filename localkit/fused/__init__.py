"""Fused attention kernels on PyTorch, shared by :mod:`localkit.nn` and the engine's array-API
backend: :mod:`~localkit.fused.flex` (FlexAttention: a profile's log-weight as ``score_mod``,
windows and masks as block sparsity) and :mod:`~localkit.fused.triton_attention` (our flash
kernel in Triton for every profile, forward and backward). Importing a module of this package
imports torch (and Triton for the latter); ``import localkit`` never does.
"""
