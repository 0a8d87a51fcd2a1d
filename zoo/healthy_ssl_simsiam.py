"""SimSiam pretraining of a tabular encoder with the stop-gradient in place: no finding.

The model and loop of ssl_simsiam_no_stop_gradient.py, whose `forward` returns
`p1, p2, z1.detach(), z2.detach()` as SimSiam does: each prediction chases the other view's
embedding, never the other way round, and the embeddings stay spread over the sphere.

traindoc-expect:
"""

from ssl_simsiam_no_stop_gradient import main

if __name__ == "__main__":
    main(stop_gradient=True)
