"""ImageNet-style DDP training under torchrun.

torchrun --nproc_per_node=8 ddp_torchrun.py --data /data/imagenet
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def setup():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    return dist.get_rank(), dist.get_world_size(), local_rank


def reduce_mean(value: torch.Tensor) -> torch.Tensor:
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / dist.get_world_size()


def train_one_epoch(model, loader, criterion, optimizer, scheduler, scaler, epoch, rank):
    model.train()
    loader.sampler.set_epoch(epoch)
    t0 = time.time()
    for i, (images, target) in enumerate(loader):
        images = images.cuda(non_blocking=True)
        target = target.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            output = model(images)
            loss = criterion(output, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if i % 100 == 0:
            with torch.no_grad():
                dist.all_reduce(loss, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"epoch {epoch} iter {i}/{len(loader)} loss {loss.item():.4f} "
                      f"lr {scheduler.get_last_lr()[0]:.4f} {time.time() - t0:.1f}s")


@torch.no_grad()
def validate(model, loader, criterion):
    model.eval()
    stats = torch.zeros(3, device="cuda")  # loss sum, correct, count
    for images, target in loader:
        images, target = images.cuda(non_blocking=True), target.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            output = model(images)
        stats[0] += criterion(output.float(), target).item() * target.size(0)
        stats[1] += (output.argmax(1) == target).sum()
        stats[2] += target.size(0)
    dist.all_reduce(stats)
    return (stats[0] / stats[2]).item(), (stats[1] / stats[2]).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--batch-size", type=int, default=256, help="per GPU")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--wd", type=float, default=1e-4)
    parser.add_argument("--out", default="checkpoints")
    args = parser.parse_args()

    rank, world_size, local_rank = setup()
    model = torchvision.models.__dict__[args.arch]().cuda()
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model, device_ids=[local_rank])

    tf_train = torchvision.transforms.Compose([
        torchvision.transforms.RandomResizedCrop(224),
        torchvision.transforms.RandomHorizontalFlip(),
        torchvision.transforms.ToTensor(),
    ])
    tf_val = torchvision.transforms.Compose([
        torchvision.transforms.Resize(256),
        torchvision.transforms.CenterCrop(224),
        torchvision.transforms.ToTensor(),
    ])
    train_set = torchvision.datasets.ImageFolder(os.path.join(args.data, "train"), tf_train)
    val_set = torchvision.datasets.ImageFolder(os.path.join(args.data, "val"), tf_val)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=DistributedSampler(train_set),
                              num_workers=10, pin_memory=True, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, sampler=DistributedSampler(val_set, shuffle=False),
                            num_workers=10, pin_memory=True)

    criterion = nn.CrossEntropyLoss(label_smoothing=0.1).cuda()
    lr = args.lr * args.batch_size * world_size / 256
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=args.wd)
    steps = args.epochs * len(train_loader)
    warmup = 5 * len(train_loader)
    scheduler = torch.optim.lr_scheduler.SequentialLR(
        optimizer,
        [torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, total_iters=warmup),
         torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps - warmup)],
        milestones=[warmup],
    )

    os.makedirs(args.out, exist_ok=True)
    for epoch in range(args.epochs):
        train_one_epoch(model, train_loader, criterion, optimizer, scheduler, None, epoch, rank)
        val_loss, val_acc = validate(model, val_loader, criterion)
        if rank == 0:
            print(f"epoch {epoch}: val loss {val_loss:.4f} acc {val_acc:.4f}")
            state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                     "scheduler": scheduler.state_dict(), "epoch": epoch}
            path = os.path.join(args.out, "checkpoint.pth")
            torch.save(state, path + ".partial")
            os.replace(path + ".partial", path)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
