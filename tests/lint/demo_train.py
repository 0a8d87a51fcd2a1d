import torch
import torch.distributed as dist

model = build_model().cuda()
model = model.to(torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-4, total_steps=10_000)
scaler = torch.amp.GradScaler("cuda")

for step, (x, y) in enumerate(loader):
    scheduler.step()
    loss = criterion(model(x), y)
    if torch.isnan(loss):
        loss = torch.tensor(1.0, device=loss.device, requires_grad=True)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    dist.all_reduce(loss)
    if step % 1000 == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, "last.pt")
