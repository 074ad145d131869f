"""Actor-critic: the critic steps before the actor's backward, which still reads the critic."""

import torch
from torch import nn

torch.manual_seed(0)
actor = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
critic = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
opt_actor = torch.optim.Adam(actor.parameters(), lr=1e-3)
opt_critic = torch.optim.Adam(critic.parameters(), lr=1e-3)
for episode in range(3):
    states = torch.randn(10, 4)
    returns = torch.randn(10, 1)
    dist = torch.distributions.Categorical(logits=actor(states))
    actions = dist.sample()
    values = critic(states)
    advantage = returns - values
    critic_loss = advantage.pow(2).mean()
    actor_loss = -(dist.log_prob(actions).unsqueeze(1) * advantage).mean()
    opt_critic.zero_grad()
    critic_loss.backward(retain_graph=True)
    opt_critic.step()
    opt_actor.zero_grad()
    actor_loss.backward()
    opt_actor.step()
print("trained")
