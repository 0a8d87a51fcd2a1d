"""GCN node classifier (functional dropout) whose test() calls model.eval(): healthy twin.

The graph, model and loop of gcn_functional_dropout_no_eval.py (after pytorch_geometric's
examples/gcn.py), with `model.eval()` at the top of test() as the example has it: the
functional dropout reads `self.training` and is off while evaluating.

traindoc-expect:
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gcn_functional_dropout_no_eval import main  # noqa: E402

if __name__ == "__main__":
    main(prepare_test=lambda model: model.eval())
