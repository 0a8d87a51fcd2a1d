"""ImageNet-style training with a model EMA that also tracks BatchNorm buffers (timm style)."""
import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader


class ModelEma:
    """Exponential moving average of a model's weights *and* buffers."""

    def __init__(self, model: nn.Module, decay: float = 0.9998):
        self.module = copy.deepcopy(model).eval()
        self.decay = decay
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module):
        ema_state = self.module.state_dict()
        for name, value in model.state_dict().items():
            if value.dtype.is_floating_point:
                ema_state[name].mul_(self.decay).add_(value, alpha=1 - self.decay)
            else:
                ema_state[name].copy_(value)  # num_batches_tracked


def accuracy(net, loader, device):
    net.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            logits = net(images.to(device, non_blocking=True))
            correct += (logits.argmax(1).cpu() == labels).sum().item()
            total += labels.numel()
    return correct / total


def main(data="/data/imagenette", epochs=40, lr=2e-3, out="runs/ema"):
    device = torch.device("cuda")
    tf = torchvision.transforms
    train_set = torchvision.datasets.ImageFolder(os.path.join(data, "train"), tf.Compose([
        tf.RandomResizedCrop(160), tf.RandomHorizontalFlip(), tf.ToTensor()]))
    val_set = torchvision.datasets.ImageFolder(os.path.join(data, "val"), tf.Compose([
        tf.Resize(192), tf.CenterCrop(160), tf.ToTensor()]))
    train_loader = DataLoader(train_set, batch_size=128, shuffle=True, num_workers=8, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=256, num_workers=8)

    model = torchvision.models.resnet26 if hasattr(torchvision.models, "resnet26") else torchvision.models.resnet18
    model = model(num_classes=10).to(device)
    ema = ModelEma(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    steps = epochs * len(train_loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, s / 500) * 0.5 * (1 + math.cos(math.pi * s / steps)))

    os.makedirs(out, exist_ok=True)
    for epoch in range(epochs):
        model.train()
        for images, labels in train_loader:
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            ema.update(model)
        print(f"epoch {epoch}: acc {accuracy(model, val_loader, device):.4f} "
              f"ema acc {accuracy(ema.module, val_loader, device):.4f}")
        torch.save({"model": model.state_dict(), "ema": ema.module.state_dict(),
                    "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "epoch": epoch}, os.path.join(out, f"epoch{epoch:03d}.pt"))


if __name__ == "__main__":
    main()
