"""The live face: observe a training run as it happens (``traindoc run``, ``traindoc.watch``)."""
