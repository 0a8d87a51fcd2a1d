"""The same mmcv-style backbone with `model.train()` at the start of every epoch: the healthy twin of freeze_in_train_never_called.

`train()` runs `_freeze_stages()`, so the stem and first stage stop receiving gradients and
keep their weights; the optimizer was built over every parameter before that, which PyTorch
handles (parameters without a gradient are skipped by the step).

traindoc-expect:
"""

from freeze_in_train_never_called import main

if __name__ == "__main__":
    main(call_train=True)
