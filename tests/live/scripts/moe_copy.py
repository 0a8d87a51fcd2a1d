"""A small mixture-of-experts regression that copies, pickles, saves, prints and compiles its model
mid-run, as EMA, checkpoint and logging code does.

A router nn.Linear scores four expert nn.Linear layers, softmax gives the gate weights, the output
is the gate-weighted sum of the experts. Adam trains it 40 steps. At step 30 the script does what
training code does to a model while it trains: copy.deepcopy(model) (an EMA / teacher copy),
pickle.dumps(model) (a multiprocessing hand-off), torch.save(model, buffer) (a whole-module
checkpoint), repr(model) (printed to the log), list(model.state_dict()) (a checkpoint's keys,
which must be the keys from before training), and one forward through torch.compile(model)
(aot_eager backend). Every copy must give the model's own output. Prints OK at the end.
traindoc must change none of this (patient safety: the observer's hooks must not leak into the
user's model objects).
"""

import argparse
import copy
import io
import pickle

import torch
import torch.nn as nn
import torch.nn.functional as F


class MoE(nn.Module):
    def __init__(self, dim: int = 8, n_experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(dim, n_experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gates = F.softmax(self.router(x), dim=-1)  # (B, E)
        outs = torch.stack([expert(x) for expert in self.experts], dim=1)  # (B, E, D)
        return (gates.unsqueeze(-1) * outs).sum(dim=1)  # (B, D)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
    args = p.parse_args()
    torch.manual_seed(0)

    model = MoE()
    keys = list(model.state_dict())
    text = repr(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    target = nn.Linear(8, 8)
    for p_ in target.parameters():
        p_.requires_grad_(False)
    probe = torch.randn(16, 8)

    for step in range(args.steps):
        x = torch.randn(64, 8)
        loss = F.mse_loss(model(x), torch.tanh(target(x)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

        if step == 30:
            with torch.no_grad():
                want = model(probe)

                twin = copy.deepcopy(model)
                assert torch.equal(twin(probe), want), "deepcopy gives another output"

                thawed = pickle.loads(pickle.dumps(model))
                assert torch.equal(thawed(probe), want), "pickle round trip gives another output"

                buffer = io.BytesIO()
                torch.save(model, buffer)
                buffer.seek(0)
                loaded = torch.load(buffer, weights_only=False)
                assert torch.equal(loaded(probe), want), "torch.save/torch.load gives another output"

                assert repr(model) == text, f"repr changed:\n{repr(model)}\n---\n{text}"
                now = list(model.state_dict())
                assert now == keys, f"state_dict keys changed: {now}"
                assert list(twin.state_dict()) == keys, f"deepcopy's keys: {list(twin.state_dict())}"

                # aot_eager: Dynamo and AOTAutograd trace the model (and any hook on it) as with
                # the default backend, without inductor's C++ codegen (seconds instead of ~20 s on CPU)
                compiled = torch.compile(model, backend="aot_eager")
                got = compiled(probe)
                assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
            print(f"step {step}: deepcopy, pickle, torch.save, repr, state_dict, torch.compile agree")
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:3d} | loss {loss.item():.5f}")

    if args.save:
        torch.save(model.state_dict(), args.save)
    print("OK")


if __name__ == "__main__":
    main()
