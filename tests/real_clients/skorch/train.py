"""A skorch user's script, as its README starts: a small torch module wrapped in a scikit-learn
``NeuralNetClassifier`` and fitted on ``make_classification`` data (skorch keeps 20% for
validation and evaluates it each epoch). CPU, seconds.

    python train.py --save model.pt
    python train.py --bug logits_nll   # the module returns logits; the classifier's NLLLoss takes
                                       # the log of its output, made for probabilities
    python train.py --bug tiny_lr      # SGD at 1e-6
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import make_classification
from skorch import NeuralNetClassifier


class MyModule(nn.Module):
    def __init__(self, num_units: int = 10, nonlin: nn.Module | None = None, softmax: bool = True) -> None:
        super().__init__()
        self.dense0 = nn.Linear(20, num_units)
        self.nonlin = nonlin or nn.ReLU()
        self.dropout = nn.Dropout(0.5)
        self.dense1 = nn.Linear(num_units, num_units)
        self.output = nn.Linear(num_units, 2)
        self.softmax = nn.Softmax(dim=-1) if softmax else nn.Identity()

    def forward(self, X: torch.Tensor, **kwargs: object) -> torch.Tensor:
        X = self.nonlin(self.dense0(X))
        X = self.dropout(X)
        X = self.nonlin(self.dense1(X))
        return self.softmax(self.output(X))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bug", choices=("none", "logits_nll", "tiny_lr"), default="none")
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    X, y = make_classification(1000, 20, n_informative=10, random_state=0)
    X, y = X.astype(np.float32), y.astype(np.int64)
    net = NeuralNetClassifier(MyModule, module__softmax=args.bug != "logits_nll", max_epochs=20,
                              lr=1e-6 if args.bug == "tiny_lr" else 0.1, iterator_train__shuffle=True)
    net.fit(X, y)
    print("train accuracy", (net.predict(X) == y).mean())
    if args.save:
        torch.save(net.module_.state_dict(), args.save)


if __name__ == "__main__":
    main()
