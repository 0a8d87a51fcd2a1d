"""MNIST-style convnet with functional dropout whose test() calls model.eval(): healthy twin.

The network, data and loop of mnist_functional_dropout_no_eval.py (after pytorch/examples'
mnist/main.py, older form, with `F.dropout(x, training=self.training)` in forward), with
`model.eval()` at the top of test(), as the example has it: dropout is off during the test
passes, and train() switches it back on.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mnist_functional_dropout_no_eval import main  # noqa: E402

if __name__ == "__main__":
    main(prepare_test=lambda model: model.eval())
