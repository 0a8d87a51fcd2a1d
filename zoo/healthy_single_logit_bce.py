"""Churn classifier ending in nn.Sigmoid over its one output unit, trained with BCELoss: no finding.

The model and loop of single_class_softmax_bce.py with the activation a one-unit binary
classifier needs: a sigmoid gives that unit a probability of its own.

traindoc-expect:
"""

from single_class_softmax_bce import main

if __name__ == "__main__":
    main(head="sigmoid")
