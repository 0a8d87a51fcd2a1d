"""Checkpoint source: ``traindoc ckpt inspect`` and ``traindoc ckpt diff``.

``read`` opens a checkpoint file or folder safely (``weights_only=True``, memory-mapped,
tensor by tensor), ``produce`` turns it into the shared events (``Checkpoint``,
``Optimizer``, ``ParamStats``, ``BatchNormState``), ``summary`` prints the tables, ``cli``
wires the commands. Importing this package does not import torch.
"""
