"""BYOL with its momentum target, an EMA copy of the online encoder that gets no gradient: no finding.

The learner and loop of ssl_byol_online_target.py with `use_momentum=True`: the target encoder
is a copy of the online one whose parameters require no grad, moved towards it after every step
(decay 0.99). The predictor chases a slowly moving target and the embeddings stay apart.

traindoc-expect:
"""

from ssl_byol_online_target import main

if __name__ == "__main__":
    main(use_momentum=True)
