"""The benchmark's policies, torch modules (``pip install -e ".[torch]"``):

- ``ChunkPolicy``: a small CNN + MLP actor-critic over a camera image and proprioception, emitting
  action chunks (``fastenv bench``'s policy, and the examples' PPO);
- ``ExactChunkPolicy``: integer arithmetic, so each env's actions are the same bits in any batch
  and on any device (``fastenv bench --regime server``);
- ``VLASizedTransformer``: random weights at a VLA's scale, to spend a VLA's cost on a GPU.
"""

from __future__ import annotations

import contextlib
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


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on uint64 arrays (wrapping arithmetic): well-mixed bits from a counter."""
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class ExactChunkPolicy:
    """Action chunks computed in integer arithmetic: the same bits on any device and in any batch.

    A float policy's output for one env depends on which rows share its batch (kernels differ by
    batch size) and on the device. This one reads each env's camera images and proprioception as
    a policy does, but every operation is exact: block sums of the image pixels and the state
    scaled by a power of two make integer features, a fixed integer matrix maps them to the
    chunk's K x d outputs, and a counter-based hash of (seed, env id, the env's chunk count) adds
    exploration noise. Each row's actions depend on that row alone, so an env gets the same actions
    whether it is served alone, in a pipeline stage or in a dynamic batch, on the CPU or a GPU: what
    ``fastenv bench --regime server`` needs to compare layouts' data bit for bit while the policy is
    batched (``ChunkPolicy.act_rows`` evaluates row by row instead).

    ``fingerprint`` digests each row's observation the same exact way (a random linear form over
    its bytes in int64, which no batch or reduction order changes), on the device the
    observation was copied to for the policy anyway.

    Args:
        image_shapes: (H, W, C) of each uint8 camera image, in the order the images are given.
        state_dim: size of the float32 state vector.
        chunk: K; ``action_dim``: d.
        seed: the weights' and the noise's seed.
        grid: image features are the sums of ``grid`` x ``grid`` blocks per channel.

    Examples:
        >>> policy = ExactChunkPolicy([(8, 8, 3)], state_dim=4, chunk=2, action_dim=3)
        >>> images = [torch.zeros(2, 8, 8, 3, dtype=torch.uint8)]
        >>> state = torch.zeros(2, 4)
        >>> policy.act(images, state, np.array([0, 1]), np.array([0, 0])).shape
        torch.Size([2, 2, 3])
    """

    def __init__(self, image_shapes: list[tuple[int, int, int]], state_dim: int, chunk: int, action_dim: int = 7, *, seed: int = 0,
                 grid: int = 4) -> None:
        self.image_shapes = [tuple(int(v) for v in shape) for shape in image_shapes]
        for h, w, c in self.image_shapes:
            if h % grid or w % grid:
                raise ValueError(f"image sides must be multiples of grid={grid}, got {h}x{w}")
        self.state_dim, self.chunk, self.action_dim, self.seed, self.grid = int(state_dim), int(chunk), int(action_dim), int(seed), grid
        rng = np.random.default_rng(seed)
        features = sum(grid * grid * c for _, _, c in self.image_shapes) + self.state_dim
        self.weights = torch.as_tensor(rng.integers(-3, 4, (features, chunk * action_dim)), dtype=torch.int64)
        # the fingerprint's linear forms: pixels' weights below 2**31, the state's bits' below 2**20 (no int64 overflow)
        self.pixel_weights = [torch.as_tensor(rng.integers(0, 2**31, h * w * c), dtype=torch.int64) for h, w, c in self.image_shapes]
        self.state_weights = torch.as_tensor(rng.integers(0, 2**20, self.state_dim), dtype=torch.int64)
        self.device = torch.device("cpu")

    def to(self, device: Any) -> ExactChunkPolicy:
        self.device = torch.device(device)
        self.weights = self.weights.to(self.device)
        self.pixel_weights = [w.to(self.device) for w in self.pixel_weights]
        self.state_weights = self.state_weights.to(self.device)
        return self

    def features(self, images: list[Any], state: Any) -> Any:
        """Integer features (B, F): per image the pixel sums of each block and channel, then the state x 256, floored."""
        parts = []
        g = self.grid
        for image, (h, w, c) in zip(images, self.image_shapes):
            b = image.shape[0]
            blocks = image.reshape(b, g, h // g, g, w // g, c).to(torch.int64).sum(dim=(2, 4))
            parts.append(blocks.reshape(b, -1))
        parts.append(torch.floor(state.to(torch.float32) * 256.0).to(torch.int64))
        return torch.cat(parts, dim=1)

    def noise(self, env_ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(B, K x d) int64 in [0, 2**20): a hash of (seed, env id, chunk count, output index)."""
        ids = np.asarray(env_ids, dtype=np.uint64)[:, None]
        n = np.asarray(counts, dtype=np.uint64)[:, None]
        j = np.arange(self.chunk * self.action_dim, dtype=np.uint64)[None, :]
        with np.errstate(over="ignore"):
            key = _splitmix64(np.uint64(self.seed) ^ (ids << np.uint64(40)) ^ (n << np.uint64(12)) ^ j)
        return (key >> np.uint64(44)).astype(np.int64)

    def act(self, images: list[Any], state: Any, env_ids: np.ndarray, counts: np.ndarray, noise: Any = None) -> Any:
        """Actions (B, K, d) float32 in [-1, 1) on the images' device for env ``env_ids`` at their ``counts``-th chunk.

        ``noise``: ``self.noise(env_ids, counts)`` already on the device (else computed and copied here).
        """
        logits = (self.features(images, state)[:, :, None] * self.weights[None]).sum(dim=1)
        if noise is None:
            noise = torch.as_tensor(self.noise(env_ids, counts), device=logits.device)
        z = torch.remainder(logits + noise, 4096)
        return ((z.to(torch.float32) - 2048.0) / 2048.0).reshape(-1, self.chunk, self.action_dim)

    def fingerprint(self, images: list[Any], state: Any) -> Any:
        """(B,) int64: each row's images and state under fixed random linear forms, exactly."""
        b = state.shape[0]
        total = (state.to(torch.float32).contiguous().view(torch.int32).to(torch.int64) * self.state_weights).sum(dim=1)
        for image, weights in zip(images, self.pixel_weights):
            total = total + (image.reshape(b, -1).to(torch.int64) * weights).sum(dim=1)
        return total


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
        device: where the parameters are made (default: torch's default device).

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
        vision_width: int = 1152, vision_depth: int = 27, vision_mlp: int = 4304, dtype: Any = None, device: Any = None,
    ) -> None:
        super().__init__()
        # Built where it runs (``device``): 2.2B parameters made on the CPU and then moved take far longer.
        with torch.device(device) if device is not None else contextlib.nullcontext():
            self._build(chunk, views, prompt_tokens, width, depth, mlp, heads, expert_width, expert_mlp, steps, action_dim,
                        vision_width, vision_depth, vision_mlp, dtype)

    def _build(self, chunk: int, views: int, prompt_tokens: int, width: int, depth: int, mlp: int, heads: int, expert_width: int,
               expert_mlp: int, steps: int, action_dim: int, vision_width: int, vision_depth: int, vision_mlp: int, dtype: Any) -> None:
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
        self.patch = 14  # SigLIP's patches: 16 x 16 of 14 px over a 224-px view
        self.embed = nn.Linear(3 * self.patch * self.patch, vision_width)
        self.to(self.dtype).eval()

    def parameters_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def patches(self, images: Any) -> Any:
        """A VLA's image preprocessing on the device: uint8 views (B, V, H, W, 3) resized to 224 px,
        scaled to [-1, 1], cut into 256 patches of 14 x 14 and embedded: (B * V, 256, vision_width)."""
        b, v, h, w, c = images.shape
        x = images.reshape(b * v, h, w, c).permute(0, 3, 1, 2).to(self.dtype)
        x = torch.nn.functional.interpolate(x, size=(224, 224), mode="bilinear", align_corners=False) / 127.5 - 1.0
        x = x.unfold(2, self.patch, self.patch).unfold(3, self.patch, self.patch)  # (BV, C, 16, 16, 14, 14)
        x = x.permute(0, 2, 3, 1, 4, 5).reshape(b * v, 256, c * self.patch * self.patch)
        return self.embed(x)

    @torch.no_grad()
    def run(self, batch: int, images: Any = None) -> Any:
        """One call over ``batch`` observations: the tower per view, the backbone over the prefix, ``steps`` expert passes.

        ``images``: the batch's camera views on the model's device, uint8 (B, V, H, W, 3) with V =
        ``views``, preprocessed as a VLA does (``patches``); None: random patches of the same shape.
        """
        device = next(self.parameters()).device
        if images is None:
            patches = torch.randn(batch * self.views, 256, self.vision_width, device=device, dtype=self.dtype)
        else:
            if tuple(images.shape[:2]) != (batch, self.views) or images.shape[-1] != 3:
                raise ValueError(f"images must be (batch={batch}, views={self.views}, H, W, 3), got {tuple(images.shape)}")
            patches = self.patches(images)
        images = self.project(self.vision(patches)).reshape(batch, 256 * self.views, self.width)
        prompt = torch.randn(batch, self.prompt_tokens, self.width, device=device, dtype=self.dtype)
        memory = self.bridge(self.backbone(torch.cat([images, prompt], dim=1)))
        actions = torch.randn(batch, self.chunk, self.action_dim, device=device, dtype=self.dtype)
        for _ in range(self.steps):
            actions = actions - self.action_out(self.expert(self.action_in(actions), memory)) / self.steps
        return actions
