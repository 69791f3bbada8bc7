"""A light turn-level critic: V(s_t) from the policy's final hidden state at a turn boundary.

The state a turn acts from is the context before its first sampled token; its feature is the policy's
last-layer hidden state at the context's last token (no grad: the critic never moves the policy). The
critic is a 2-layer MLP trained by MSE on per-turn targets (ARPO: the trajectory's outcome; Turn-PPO:
GAE returns), with its own Adam optimiser; both are part of the stage's checkpoints.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from rlvr.models.lm_head import final_hidden_states

CRITIC_FILE = "turn_critic.pt"


class TurnCritic(nn.Module):
    """``features [N, H] -> values [N]``: Linear(H, hidden) -> tanh -> Linear(hidden, 1)."""

    def __init__(self, in_dim: int, hidden: int = 64, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / max(1, p.shape[-1])) ** 0.5)
            self.net[-1].weight.mul_(0.01)
            self.net[-1].bias.zero_()

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.net(feats.float()).squeeze(-1)


def fit_critic(critic: TurnCritic, opt: torch.optim.Optimizer, feats: torch.Tensor, targets: torch.Tensor,
               steps: int) -> float:
    """``steps`` full-batch Adam steps of MSE(V(feats), targets); returns the last loss (before its step)."""
    loss_val = 0.0
    for _ in range(steps):
        loss = torch.mean((critic(feats) - targets.float()) ** 2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_val = float(loss.detach())
    return loss_val


@torch.no_grad()
def boundary_features(model, seqs: list[list[int]], positions: list[list[int]], pad_id: int,
                      micro: int = 16) -> list[torch.Tensor]:
    """Per sequence, the final hidden states ``[len(positions[i]), H]`` at ``positions[i]`` (right padding)."""
    was = model.training
    model.eval()
    out: list[torch.Tensor] = []
    try:
        for s in range(0, len(seqs), micro):
            chunk = seqs[s:s + micro]
            width = max(len(c) for c in chunk)
            ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            att = torch.zeros_like(ids)
            for i, c in enumerate(chunk):
                ids[i, :len(c)] = torch.tensor(c)
                att[i, :len(c)] = 1
            dev = model.device
            hid = final_hidden_states(model, input_ids=ids.to(dev), attention_mask=att.to(dev)).float().cpu()
            for i, pos in enumerate(positions[s:s + micro]):
                out.append(hid[i, torch.tensor(pos, dtype=torch.long)])
    finally:
        model.train(was)
    return out


def save_critic(critic: TurnCritic, folder: str | Path) -> Path:
    path = Path(folder) / CRITIC_FILE
    torch.save({"state_dict": critic.state_dict(), "in_dim": critic.net[0].in_features,
                "hidden": critic.net[0].out_features}, path)
    return path
