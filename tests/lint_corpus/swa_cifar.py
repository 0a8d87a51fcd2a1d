import torch
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn
from torch.utils.data import DataLoader

device = "cuda"
transform = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor()])
train_loader = DataLoader(torchvision.datasets.CIFAR10("data", train=True, download=True, transform=transform),
                          batch_size=128, shuffle=True, num_workers=4)
test_loader = DataLoader(torchvision.datasets.CIFAR10("data", train=False, download=True, transform=T.ToTensor()),
                         batch_size=512, num_workers=4)

model = torchvision.models.resnet18(num_classes=10).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
swa_model = AveragedModel(model)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
swa_start = 75
swa_scheduler = SWALR(optimizer, swa_lr=0.05)


def test(net):
    net.eval()
    correct = 0
    with torch.no_grad():
        for x, y in test_loader:
            correct += (net(x.to(device)).argmax(1) == y.to(device)).sum().item()
    return correct / len(test_loader.dataset)


for epoch in range(100):
    model.train()
    for x, y in train_loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    if epoch > swa_start:
        swa_model.update_parameters(model)
        swa_scheduler.step()
    else:
        scheduler.step()
    print(f"epoch {epoch}: test acc {test(model):.4f}")

# Recompute BatchNorm statistics for the averaged weights before evaluating them.
update_bn(train_loader, swa_model, device=device)
print(f"SWA test acc {test(swa_model):.4f}")
torch.save(swa_model.module.state_dict(), "swa_resnet18.pt")
