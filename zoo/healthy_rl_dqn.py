"""DQN with a target network whose bootstrap target is computed under torch.no_grad(): no finding.

The cart-pole DQN of rl_dqn_target_with_grad.py (replay buffer, epsilon-greedy, ten Adam updates
per episode, the target network refreshed with `load_state_dict` every 10 episodes), with
r + gamma * max_a Q_target(s', a) computed under `torch.no_grad()`, as DQN code should: the
target network gets no gradient and the backward runs through the online network only.

traindoc-expect:
"""

from rl_dqn_target_with_grad import main

if __name__ == "__main__":
    main(detach=True)
