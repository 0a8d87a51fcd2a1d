"""A PyTorch-Ignite user's script, as its quick start goes: ``create_supervised_trainer``, an
evaluator run on the validation loader at each epoch's end, handlers attached with
``@trainer.on``. A small tabular task drawn here; CPU, seconds.

    python train.py --save model.pt
    python train.py --bug eval_no_eval_mode   # a hand-written evaluation step that never calls model.eval()
    python train.py --bug tiny_lr             # SGD at 1e-7
    python train.py --bug ckpt_no_optimizer   # the resume checkpoint leaves out the optimizer

Checkpoints as its docs save them: the best model by validation accuracy (bare weights, to keep)
and, every epoch, ``{"model", "optimizer", "trainer"}`` to resume from (written to a temporary
file and renamed by ``DiskSaver``).
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from ignite.engine import Engine, Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import Checkpoint, DiskSaver, ModelCheckpoint, global_step_from_engine
from ignite.metrics import Accuracy, Loss


class Net(nn.Module):
    def __init__(self, d_in: int = 20, hidden: int = 64, classes: int = 4) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(0.2), nn.Linear(hidden, hidden),
                                  nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def loaders(seed: int = 0) -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(20, 4, generator=g)
    x = torch.randn(1200, 20, generator=g)
    y = (x @ w + 0.5 * torch.randn(1200, 4, generator=g)).argmax(1)
    train = TensorDataset(x[:1000], y[:1000])
    val = TensorDataset(x[1000:], y[1000:])
    return (DataLoader(train, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(seed)),
            DataLoader(val, batch_size=100))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bug", choices=("none", "eval_no_eval_mode", "tiny_lr", "ckpt_no_optimizer"), default="none")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    train_loader, val_loader = loaders()
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-7 if args.bug == "tiny_lr" else 0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    trainer = create_supervised_trainer(model, optimizer, criterion)
    metrics = {"accuracy": Accuracy(), "nll": Loss(criterion)}
    if args.bug == "eval_no_eval_mode":
        # a hand-written evaluation step, as the docs' "custom evaluator" shows, without model.eval()
        def eval_step(engine, batch):
            with torch.no_grad():
                x, y = batch
                return model(x), y
        evaluator = Engine(eval_step)
        for name, metric in metrics.items():
            metric.attach(evaluator, name)
    else:
        evaluator = create_supervised_evaluator(model, metrics=metrics)

    @trainer.on(Events.ITERATION_COMPLETED(every=20))
    def log_training_loss(engine):
        print(f"Epoch[{engine.state.epoch}] Iteration[{engine.state.iteration}] Loss: {engine.state.output:.3f}")

    @trainer.on(Events.EPOCH_COMPLETED)
    def log_validation_results(engine):
        evaluator.run(val_loader)
        m = evaluator.state.metrics
        print(f"Validation Results - Epoch: {engine.state.epoch} Avg accuracy: {m['accuracy']:.3f} Avg loss: {m['nll']:.3f}")

    best = ModelCheckpoint("checkpoints", n_saved=1, filename_prefix="best", require_empty=False,
                           score_function=lambda e: e.state.metrics["accuracy"], score_name="accuracy",
                           global_step_transform=global_step_from_engine(trainer))
    evaluator.add_event_handler(Events.COMPLETED, best, {"model": model})
    to_save = {"model": model, "optimizer": optimizer, "trainer": trainer}
    if args.bug == "ckpt_no_optimizer":
        del to_save["optimizer"]
    saver = Checkpoint(to_save, DiskSaver("checkpoints", require_empty=False), n_saved=2)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, saver)
    trainer.run(train_loader, max_epochs=args.epochs)
    if args.save:
        torch.save(model.state_dict(), args.save)


if __name__ == "__main__":
    main()
