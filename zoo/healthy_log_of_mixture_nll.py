"""The mixture of softmax experts of moe_softmax_experts_cross_entropy.py, trained right: no finding.

A mixture of probability vectors is a probability vector: its log goes to `F.nll_loss`, which
takes log-probabilities (the log ends traindoc's walk, so the softmax under it is not read).

traindoc-expect:
"""

from moe_softmax_experts_cross_entropy import main

if __name__ == "__main__":
    main(log_of_mixture=True)
