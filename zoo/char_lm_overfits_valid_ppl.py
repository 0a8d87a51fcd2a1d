"""Character LSTM language model that memorizes a small corpus: valid loss and perplexity climb.

Written in the style of a classic word-language-model example: a corpus cut into `batchify`
columns, truncated backpropagation through time with `repackage_hidden`, a plain SGD update
by hand (`p.data.add_(p.grad, alpha=-lr)`) after clipping, and one line per epoch, `| end of
epoch N | valid loss X | valid ppl Y`. The corpus is 4,000 characters drawn from a random
order-1 Markov chain over 24 letters, the validation text 1,500 more from the same chain; the
LSTM has 256 hidden units and no dropout (`--dropout 0`). After a few epochs it starts to
memorize the training text: the training loss keeps falling towards 0 while the validation
loss climbs from its best near the chain's entropy to several times it, and the perplexity
with it (exp of the loss: from a best of 7.4 to above 80). The script keeps only the last model.
Catalog `train-val-divergence` and `metric-divergence` (the perplexity).

traindoc-expect: train-val-divergence metric-divergence
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--nhid", type=int, default=256)
parser.add_argument("--emsize", type=int, default=32)
parser.add_argument("--lr", type=float, default=4.0)
parser.add_argument("--clip", type=float, default=0.5)
parser.add_argument("--epochs", type=int, default=45)
parser.add_argument("--batch_size", type=int, default=8)
parser.add_argument("--bptt", type=int, default=40)
parser.add_argument("--dropout", type=float, default=0.0)
parser.add_argument("--seed", type=int, default=1111)
parser.add_argument("--save", type=str, default=None, help="write model.state_dict() here")
args = parser.parse_args()

torch.manual_seed(args.seed)
VOCAB = 24


def markov_text(n: int, gen: torch.Generator) -> torch.Tensor:
    """Characters of a chain whose next letter depends on the current one (entropy ~2 nats)."""
    table = torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(7)) * 2.0
    probs = table.softmax(-1)
    out = torch.empty(n, dtype=torch.long)
    c = 0
    for i in range(n):
        c = int(torch.multinomial(probs[c], 1, generator=gen))
        out[i] = c
    return out


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


class RNNModel(nn.Module):
    def __init__(self, ntoken: int, ninp: int, nhid: int, dropout: float) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, inp: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]):
        output, hidden = self.rnn(self.drop(self.encoder(inp)), hidden)
        return self.decoder(self.drop(output)).view(-1, VOCAB), hidden

    def init_hidden(self, bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        weight = next(self.parameters())
        return weight.new_zeros(1, bsz, self.rnn.hidden_size), weight.new_zeros(1, bsz, self.rnn.hidden_size)


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


def get_batch(source: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


gen = torch.Generator().manual_seed(0)
train_data = batchify(markov_text(4000, gen), args.batch_size)
val_data = batchify(markov_text(1500, gen), 10)
model = RNNModel(VOCAB, args.emsize, args.nhid, args.dropout)
criterion = nn.CrossEntropyLoss()


def evaluate(data_source: torch.Tensor) -> float:
    model.eval()
    total_loss = 0.0
    hidden = model.init_hidden(10)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, args.bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train(lr: float) -> None:
    model.train()
    hidden = model.init_hidden(args.batch_size)
    for i in range(0, train_data.size(0) - 1, args.bptt):
        data, targets = get_batch(train_data, i)
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)


lr = args.lr
for epoch in range(1, args.epochs + 1):
    epoch_start_time = time.time()
    train(lr)
    val_loss = evaluate(val_data)
    print("-" * 89)
    print(f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start_time:5.2f}s | "
          f"valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}")
    print("-" * 89)

if args.save:
    torch.save(model.state_dict(), args.save)
