"""Healthy one-step actor-critic, an update at every environment step: no finding.

The one-step actor-critic of Sutton and Barto (2nd ed., section 13.5), as tutorials and
course code write it: at each environment step the actor (Linear 4-64, ReLU, Linear 64-2,
softmax) runs on the one state vector, the critic (its own Linear 4-64-1) on the state and,
without gradients, on the next one; the TD error r + 0.99 V(s') - V(s) weighs -log_prob of the
action taken and its square trains the critic, and both Adam optimizers step (actor lr 1e-3).
Episodes grow from ~15 to ~40 steps. Each step's loss is one transition's, and a terminal one
(no bootstrap: the target is the reward alone, against a value of 10 or more) is tens of times
the others: a loss of one sample has no scale a spike or a divergence could be judged by
(judged as a batch's, it was a loss spike at step 172 and a divergence at step 1685).

traindoc-expect:
"""

from rl_td_actor_critic_collapse import main

if __name__ == "__main__":
    main(lr=1e-3)
