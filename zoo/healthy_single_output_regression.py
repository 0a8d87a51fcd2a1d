"""Battery state-of-health regression with one output and an MSE loss: no finding.

The trainer and data of single_class_cross_entropy_regression.py, with the loss a regression
wants, `F.mse_loss(output, targets)`: the one output is a value, not the score of a class.

traindoc-expect:
"""

from single_class_cross_entropy_regression import main

if __name__ == "__main__":
    main(loss="mse")
