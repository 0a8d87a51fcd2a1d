"""Fine-tuning that freezes the backbone first, then attaches the new head: the healthy twin of finetune_head_frozen_too.

The same torchvision-style script with the two lines in the usual order: the freeze loop runs
over the pretrained network, then `model.fc` is replaced by a fresh (trainable) `nn.Linear`, and
SGD trains it; `loss.requires_grad_(True)` is never reached. The BatchNorm statistics of the
frozen backbone still move in train mode, as in many fine-tuning scripts.

traindoc-expect:
"""

from finetune_head_frozen_too import main

if __name__ == "__main__":
    main(fixed=True)
