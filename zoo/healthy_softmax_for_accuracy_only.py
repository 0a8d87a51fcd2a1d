"""The classifier of softmax_layer_into_cross_entropy.py without its last softmax: no finding.

nn.CrossEntropyLoss gets the raw logits of the last Linear; the loop still takes a softmax, for
the confidence it prints with the accuracy, where probabilities belong.

traindoc-expect:
"""

from softmax_layer_into_cross_entropy import main

if __name__ == "__main__":
    main(softmax_last=False)
