"""Fit a small MLP to a 1-D function with full-batch L-BFGS (physics-informed style)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
x = torch.linspace(-1, 1, 512).unsqueeze(1)
y = torch.sin(3 * torch.pi * x) + 0.1 * torch.randn_like(x)

model = nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=20, history_size=50,
                              line_search_fn="strong_wolfe")
mse = nn.MSELoss()


def closure():
    optimizer.zero_grad()
    pred = model(x)
    loss = mse(pred, y) + 1e-5 * sum(p.pow(2).sum() for p in model.parameters())
    loss.backward()
    return loss


history = []
for it in range(50):
    loss = optimizer.step(closure)
    history.append(loss.item())
    if it % 10 == 0:
        print(f"iter {it:3d} loss {loss.item():.6f}")
    if len(history) > 5 and abs(history[-5] - history[-1]) < 1e-9:
        break

with torch.no_grad():
    residual = (model(x) - y).abs().max().item()
print(f"max residual {residual:.4f}")
torch.save(model.state_dict(), "lbfgs_mlp.pt")
