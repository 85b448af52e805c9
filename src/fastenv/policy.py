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


class VLASizedTransformer(nn.Module):
    """A random-weight transformer with a VLA's shape and cost, for timing rollouts on a GPU.

    pi0 and pi0.5 run a SigLIP vision tower (27 layers, width 1152, MLP 4304) over each 224-px view
    (256 patches), a PaliGemma backbone (Gemma 2B: 18 layers, width 2048, MLP 16384) over the image
    and text tokens (256 per view, plus the prompt), then an action expert (the same
    depth, width 1024, MLP 4096) that attends to the backbone's tokens and denoises a chunk of
    actions over ``steps`` flow-matching steps. This module does the same work with random weights:
    what it computes is meaningless, what it costs is a VLA's. ``fastenv bench --policy-cost NAME``
    runs it on CUDA in place of the preset's wait (``--policy-compute transformer``).

    Args:
        chunk: actions per chunk (tokens of the action expert).
        views: camera views (256 tokens each); ``prompt_tokens`` text tokens beside them.
        vision_width, vision_depth, vision_mlp: the vision tower (run once per view).
        width, depth, mlp, heads: the backbone; ``expert_width``, ``expert_mlp``: the action expert.
        steps: flow-matching steps of the action expert.
        dtype: parameter and activation type (bf16, as VLAs are served).

    Examples:
        >>> tiny = VLASizedTransformer(chunk=4, views=1, width=32, depth=1, mlp=64, heads=2, expert_width=16,
        ...                            expert_mlp=32, steps=2, prompt_tokens=4, vision_width=16, vision_depth=1,
        ...                            vision_mlp=32, dtype=torch.float32)
        >>> tiny.run(3).shape
        torch.Size([3, 4, 7])
    """

    def __init__(
        self, chunk: int = 32, views: int = 2, *, prompt_tokens: int = 48, width: int = 2048, depth: int = 18, mlp: int = 16384,
        heads: int = 8, expert_width: int = 1024, expert_mlp: int = 4096, steps: int = 10, action_dim: int = 7,
        vision_width: int = 1152, vision_depth: int = 27, vision_mlp: int = 4304, dtype: Any = None,
    ) -> None:
        super().__init__()
        self.chunk, self.steps, self.action_dim = chunk, steps, action_dim
        self.views, self.prompt_tokens, self.width, self.vision_width = views, prompt_tokens, width, vision_width
        self.dtype = torch.bfloat16 if dtype is None else dtype
        tower = nn.TransformerEncoderLayer(vision_width, max(1, heads * 2), vision_mlp, dropout=0.0, batch_first=True, norm_first=True)
        self.vision = nn.TransformerEncoder(tower, vision_depth, enable_nested_tensor=False)
        self.project = nn.Linear(vision_width, width)
        layer = nn.TransformerEncoderLayer(width, heads, mlp, dropout=0.0, batch_first=True, norm_first=True)
        self.backbone = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.bridge = nn.Linear(width, expert_width)
        expert = nn.TransformerDecoderLayer(expert_width, max(1, heads // 2), expert_mlp, dropout=0.0, batch_first=True, norm_first=True)
        self.expert = nn.TransformerDecoder(expert, depth)
        self.action_in = nn.Linear(action_dim, expert_width)
        self.action_out = nn.Linear(expert_width, action_dim)
        self.to(self.dtype).eval()

    def parameters_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @torch.no_grad()
    def run(self, batch: int) -> Any:
        """One call over ``batch`` observations: the tower per view, the backbone over the prefix, ``steps`` expert passes."""
        device = next(self.parameters()).device
        patches = torch.randn(batch * self.views, 256, self.vision_width, device=device, dtype=self.dtype)
        images = self.project(self.vision(patches)).reshape(batch, 256 * self.views, self.width)
        prompt = torch.randn(batch, self.prompt_tokens, self.width, device=device, dtype=self.dtype)
        memory = self.bridge(self.backbone(torch.cat([images, prompt], dim=1)))
        actions = torch.randn(batch, self.chunk, self.action_dim, device=device, dtype=self.dtype)
        for _ in range(self.steps):
            actions = actions - self.action_out(self.expert(self.action_in(actions), memory)) / self.steps
        return actions
