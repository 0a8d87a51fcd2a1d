"""Tiny U-Net trained on a soft Dice plus BCE of its logits: healthy twin of unet_dice_thresholded_leaf.

The same data, network, RMSprop and ReduceLROnPlateau as
unet_dice_thresholded_leaf.py (after milesial/Pytorch-UNet's train.py), trained as people who
know the pitfall do: the soft Dice of `sigmoid(logits)` plus BCEWithLogits on the logits, both
differentiable; the thresholded mask is used for the reported validation Dice only. The loss
falls and the validation Dice rises.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from unet_dice_thresholded_leaf import main  # noqa: E402

if __name__ == "__main__":
    main(soft_dice=True)
