"""The same GPT-2 with the scaled residual init applied after the last `post_init()`: the healthy twin of repeated_init_post_init.

Every blanket init runs first, then each block's `reset_parameters()` scales its residual
projections, as nanoGPT orders them: the scaled spread is what training starts from.

traindoc-expect:
"""

from repeated_init_post_init import main

if __name__ == "__main__":
    main(fixed=True)
