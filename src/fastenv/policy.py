"""A small CNN + MLP actor-critic over a camera image and proprioception, emitting action chunks.

Used by ``fastenv bench`` and the examples. Needs torch (``pip install -e ".[torch]"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastenv._deps import require

torch = require("torch", "torch", "PyTorch")
nn = torch.nn


class ChunkPolicy(nn.Module):
    """Actor-critic: CNN(image) + MLP(proprio) -> Gaussian over a chunk of K actions, and a value.

    Args:
        image_shape: (H, W, C) of the uint8 camera image, or None for state only.
        state_dim: size of the flat state (proprioception) vector.
        chunk: K, actions per chunk.
        action_dim: size of one action.

    Examples:
        >>> policy = ChunkPolicy((128, 128, 3), 39, chunk=8, action_dim=7)
    """

    def __init__(self, image_shape: tuple[int, int, int] | None, state_dim: int, chunk: int, action_dim: int) -> None:
        super().__init__()
        self.chunk, self.action_dim = chunk, action_dim
        features = 0
        if image_shape is not None:
            h, w, c = image_shape
            self.cnn = nn.Sequential(
                nn.Conv2d(c, 16, 8, stride=4), nn.ReLU(),
                nn.Conv2d(16, 32, 4, stride=2), nn.ReLU(),
                nn.Conv2d(32, 32, 3, stride=1), nn.ReLU(),
                nn.Flatten(),
            )
            with torch.no_grad():
                features += self.cnn(torch.zeros(1, c, h, w)).shape[1]
        else:
            self.cnn = None
        self.state = nn.Sequential(nn.Linear(state_dim, 64), nn.Tanh())
        self.trunk = nn.Sequential(nn.Linear(features + 64, 256), nn.ReLU())
        self.mean = nn.Linear(256, chunk * action_dim)
        self.log_std = nn.Parameter(torch.full((chunk * action_dim,), -0.5))
        self.value = nn.Linear(256, 1)

    def forward(self, image: Any, state: Any) -> tuple[Any, Any]:
        """(action mean of shape (B, K, d), value of shape (B,)) for uint8 images (B, H, W, C)."""
        parts = [self.state(state.float())]
        if self.cnn is not None:
            parts.insert(0, self.cnn(image.permute(0, 3, 1, 2).float() / 255.0))
        h = self.trunk(torch.cat(parts, dim=1))
        return self.mean(h).view(-1, self.chunk, self.action_dim), self.value(h).squeeze(-1)

    def distribution(self, image: Any, state: Any) -> tuple[Any, Any]:
        """(Normal over the flattened chunk, value)."""
        mean, value = self(image, state)
        std = self.log_std.exp().expand_as(mean.flatten(1))
        return torch.distributions.Normal(mean.flatten(1), std), value

    @torch.no_grad()
    def act(self, obs: dict[str, np.ndarray], image_key: str | None, state_key: str, device: Any = "cpu") -> tuple[np.ndarray, np.ndarray]:
        """Sample action chunks (B, K, d), clipped to [-1, 1], and values (B,) for a batch of observations."""
        image = torch.as_tensor(obs[image_key], device=device) if image_key else None
        state = torch.as_tensor(obs[state_key], device=device)
        dist, value = self.distribution(image, state)
        action = dist.sample().clamp(-1.0, 1.0).view(-1, self.chunk, self.action_dim)
        return action.cpu().numpy().astype(np.float32), value.cpu().numpy()

    @torch.no_grad()
    def act_rows(
        self, obs: dict[str, np.ndarray], image_key: str | None, state_key: str, generators: list[Any], device: Any = "cpu"
    ) -> tuple[np.ndarray, np.ndarray]:
        """``act`` with each row on its own: evaluated alone, its noise from its own generator.

        Row i's actions depend only on row i's observation and ``generators[i]`` (CPU
        ``torch.Generator``), not on which rows are batched with it: an env gets the same actions
        whether the policy serves all envs at once, a pipeline stage or a dynamic batch.
        """
        actions, values = [], []
        for i, generator in enumerate(generators):
            image = torch.as_tensor(obs[image_key][i : i + 1], device=device) if image_key else None
            dist, value = self.distribution(image, torch.as_tensor(obs[state_key][i : i + 1], device=device))
            noise = torch.randn(dist.mean.shape, generator=generator).to(device)
            actions.append((dist.mean + dist.stddev * noise).clamp(-1.0, 1.0).view(-1, self.chunk, self.action_dim))
            values.append(value)
        return torch.cat(actions).cpu().numpy().astype(np.float32), torch.cat(values).cpu().numpy()
