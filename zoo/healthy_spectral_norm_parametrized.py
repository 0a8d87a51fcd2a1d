"""The same Lipschitz classifier and sanity validation with the parametrization API: the healthy twin of spectral_norm_sanity_eval.

`torch.nn.utils.parametrizations.spectral_norm` runs 15 power iterations when it is registered,
so the validation before the first training step already divides each weight by its true
spectral norm: its loss is near ln(10), as a fresh model's should be.

traindoc-expect:
"""

from spectral_norm_sanity_eval import main

if __name__ == "__main__":
    main(parametrized=True)
