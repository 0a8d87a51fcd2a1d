"""A VQ-VAE whose EMA codebook collapses to one code: its counts start at 0, and unused codes are divided away.

An autoencoder with a vector-quantized bottleneck, its codebook learned by exponential moving
averages (the ``VectorQuantizerEMA`` of the VQ-VAE paper's appendix, as many reimplementations
write it): per code, an EMA of how many encoder outputs chose it (``cluster_size``) and of
their sum (``embed_sum``), with Laplace smoothing, and the code set to sum / count after each
training forward. The straight-through estimator carries the decoder's gradient to the encoder;
a commitment loss (weight 0.25) pulls the encoder towards its codes. Adam at 1e-3; the data are
16-dimensional points around 8 centres.

``cluster_size`` starts at zeros. After the first update, a code that no point chose has a
smoothed count of about 1e-5 and its sum (its initial value times 0.99) is divided by it: the
code moves some 1e5 times further out and no point chooses it again. Within 100 steps every
input is quantized to the same vector and the decoder sees a constant: the loss stays near the
data's variance. zoo/healthy_vq_ema_codebook.py is the twin whose counts start at 1.

traindoc-expect: saturated-outputs@1
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class VectorQuantizerEMA(nn.Module):
    def __init__(self, num_codes, dim, decay=0.99, eps=1e-5, counts_start=0.0):
        super().__init__()
        self.decay, self.eps = decay, eps
        self.embedding = nn.Embedding(num_codes, dim)
        self.embedding.weight.requires_grad_(False)
        self.register_buffer("cluster_size", torch.full((num_codes,), counts_start))
        self.register_buffer("embed_sum", self.embedding.weight.detach().clone())

    def forward(self, z):
        distances = torch.cdist(z, self.embedding.weight)
        codes = distances.argmin(1)
        quantized = self.embedding(codes)
        if self.training:
            with torch.no_grad():
                onehot = F.one_hot(codes, self.embedding.num_embeddings).type(z.dtype)
                self.cluster_size.mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
                self.embed_sum.mul_(self.decay).add_(onehot.t() @ z, alpha=1 - self.decay)
                n = self.cluster_size.sum()
                smoothed = (self.cluster_size + self.eps) / (n + self.cluster_size.numel() * self.eps) * n
                self.embedding.weight.copy_(self.embed_sum / smoothed.unsqueeze(1))
        commitment = F.mse_loss(z, quantized.detach())
        return z + (quantized - z).detach(), commitment, codes


def main(counts_start: float = 0.0) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    centres = 3 * torch.randn(8, 16)
    data = centres[torch.randint(0, 8, (4096,))] + 0.3 * torch.randn(4096, 16)

    encoder = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8))
    quantizer = VectorQuantizerEMA(32, 8, counts_start=counts_start)
    decoder = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 16))
    params = list(encoder.parameters()) + list(decoder.parameters())
    optimizer = torch.optim.Adam(params, lr=1e-3)
    for step in range(args.steps):
        x = data[torch.randint(0, len(data), (64,))]
        z_q, commitment, codes = quantizer(encoder(x))
        loss = F.mse_loss(decoder(z_q), x) + 0.25 * commitment
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step}: loss {loss.item():.4f}, codes in use {codes.unique().numel()}")
    if args.save:
        state = {f"enc.{k}": v for k, v in encoder.state_dict().items()}
        state |= {f"vq.{k}": v for k, v in quantizer.state_dict().items()}
        torch.save(state | {f"dec.{k}": v for k, v in decoder.state_dict().items()}, args.save)


if __name__ == "__main__":
    main()
