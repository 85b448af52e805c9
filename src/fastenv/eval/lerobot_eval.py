"""LeRobot's LIBERO evaluation in ``fastenv eval``: its episode loop, its init-state schedule, its policies.

``lerobot-eval`` (LeRobot 0.6.1: ``lerobot.scripts.lerobot_eval.eval_policy_all``) evaluates a
``PreTrainedPolicy`` on ``lerobot.envs.libero.LiberoEnv``, one vector env of ``eval.batch_size``
envs per task, one action per step (the policy keeps its chunk in a queue). Here the same episodes
run over ``fastenv eval``'s workers, the policy batched over whatever envs wait, with the results
of LeRobot's run (``fastenv.conformance.eval_lerobot`` compares them):

- ``LeRobotLoop`` (``Protocol.loop == "lerobot"``): LeRobot's ``LiberoEnv.reset`` and ``step`` on
  fastenv's simulator (``fastenv.backends.libero.offscreen_env.Simulator``, the one under fastenv's
  drop-in ``fastenv.integrations.lerobot.LiberoEnv``): LIBERO seeded with the episode's seed, reset
  and put on its init state, 10 settling steps of LIBERO's dummy action, LeRobot's observation
  (``pixels``: both cameras as rendered, ``robot_state``: end effector position, quaternion and
  rotation matrix, gripper and arm joints), an action as ``float32``, the episode ended when
  LIBERO reports success, at most LeRobot's per-suite step budget (``LEROBOT_MAX_STEPS``: 280 for
  libero_spatial, where openpi's loop has 220) or the env config's ``episode_length``
  (``Protocol.max_steps``). Cameras render only at a chunk's start (where the policy's queue is
  empty and it reads the observation) and in filmed episodes.
- ``lerobot_episode_list``: which episodes an ``eval_policy_all`` run consists of (below).
- ``LeRobotPolicy``: a ``PreTrainedPolicy`` with the processors ``lerobot-eval`` builds, run as its
  ``rollout`` runs it: LeRobot's ``preprocess_observation``, the task's instruction, the env's and the
  policy's preprocessors, ``predict_action_chunk`` (what ``select_action`` calls when its queue is
  empty), its first ``n_action_steps`` rows (what the queue then pops), each row through the
  policy's and the env's postprocessors.

**LeRobot 0.6.1's schedule.** For each task, ``eval_policy`` runs ``ceil(n_episodes / batch_size)``
rollouts of its vector env; rollout ``b`` resets env ``j`` with seed ``start_seed + b * batch_size +
j`` (``lerobot-eval``'s ``--seed``, 1000 by default; the same seeds for every task) and keeps the
first ``n_episodes`` episodes in that order. Env ``j`` is built with ``init_state_id = j`` and each
``LiberoEnv.reset`` uses ``init_state_id % 50`` and then adds ``batch_size``. With the async
vector env (``eval.use_async_envs``, the default, used where ``batch_size > 1``) a finished env is
frozen (``FreezeAfterEpisodeEnd``): the vector env's autoreset does not reach ``LiberoEnv.reset``,
so each env resets once per rollout and episode ``e = b * batch_size + j`` of a task runs on init
state ``e % 50`` with seed ``start_seed + e``. With ``batch_size`` 1 (always a ``SyncVectorEnv``) the
same holds: the rollout ends when its one env does. A ``SyncVectorEnv`` of several envs
(``eval.use_async_envs=false``) autoresets a finished env on the next step while the others run on,
and each such reset moves that env's ``init_state_id`` on: the init states of later rollouts then
depend on when episodes ended (huggingface/lerobot#4152); ``lerobot_episode_list`` refuses it.

LeRobot seeds LIBERO at every reset, but the scene also depends on how many times that env was
reset before: LIBERO's hard reset loads the model again and appends another set of its
object-property samplers (articulated fixtures' open/close, on/off states: libero_spatial task 4,
libero_10 tasks 3, 8 and 9, 24 tasks of libero_90), and each draws from the seeded generator before
the objects are placed, so fixtures land elsewhere (their placement is not in the init state). An
episode of such a task is then a function of its init state, its seed and ``e // batch_size``, the
resets its env had before it: LeRobot's own results on these tasks change with ``batch_size``.
``LeRobotProtocol.batch_size`` is that batch size; fastenv's ``Episode`` carries the rest: its
``init_state`` is LeRobot's episode index ``e`` (the init state while ``e < 50``, which
``episode_list`` ensures) and its ``seed`` the run's ``start_seed`` (the env's seed is ``seed + e``).

So ``fastenv.eval.run(LeRobotPolicy(...), suite, tasks=..., episodes=N, seed=S,
protocol=policy.protocol(batch_size=B))`` runs the episodes ``lerobot-eval --eval.n_episodes=N
--eval.batch_size=B --seed=S`` keeps, whatever fastenv's workers and batches.

Not reproduced: policies that read more than the observation at a chunk's start (diffusion's
observation history, ACT's temporal ensembling, RTC, pi0/pi0.5's relative actions, whose
postprocessor adds each step's state) are refused; a stochastic policy (pi0's flow noise) draws
its noise from torch's global generator, in LeRobot per batch of ``batch_size`` envs in lockstep,
so its draws follow the batching and are not LeRobot's; a batched network may give other last bits
for another batch size (``per_sample`` runs it one observation at a time). LeRobot imports lazily:
the loop and the schedule need only LIBERO.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastenv.eval.episodes import MAX_STEPS, Episode
from fastenv.eval.policies import BatchPolicy, Request
from fastenv.eval.protocol import Protocol

__all__ = [
    "LEROBOT_MAX_STEPS", "LeRobotEpisode", "LeRobotLoop", "LeRobotPolicy", "LeRobotProtocol", "fastenv_episodes",
    "lerobot_element", "lerobot_episode_list", "per_sample",
]

# lerobot.envs.libero.TASK_SUITE_MAX_STEPS (LeRobot 0.6.1), and its default for other suites
LEROBOT_MAX_STEPS = {"libero_spatial": 280, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}
LEROBOT_DEFAULT_MAX_STEPS = 500
NUM_STEPS_WAIT = 10  # LiberoEnv's settling steps (not in its env config)
CONTROL_FREQ = 20  # the env config's fps, LiberoEnv's control_freq
RENDER_FPS = 80  # LiberoEnv.metadata["render_fps"]: what lerobot-eval writes its videos at
DUMMY_ACTION = (0, 0, 0, 0, 0, 0, -1)  # lerobot.envs.libero.get_libero_dummy_action()
# LiberoEnv's default cameras and the names its observation gives them
CAMERAS = {"agentview_image": "image", "robot0_eye_in_hand_image": "image2"}
STATE_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "robot0_gripper_qvel", "robot0_joint_pos", "robot0_joint_vel")
DEFAULT_START_SEED = 1000  # lerobot-eval's --seed


@dataclass(frozen=True)
class LeRobotProtocol(Protocol):
    """``Protocol`` with LeRobot 0.6.1's LIBERO loop and numbers.

    ``replan_steps`` is the policy's ``n_action_steps``; ``camera_size`` the env config's
    ``observation_height`` and ``observation_width`` (360 by default); ``max_steps`` its
    ``episode_length`` (None: LeRobot's per-suite budget); ``batch_size`` ``lerobot-eval``'s
    ``eval.batch_size`` (the envs per task), which sets how many resets each episode's env had
    before it (the module's docstring).
    """

    num_steps_wait: int = NUM_STEPS_WAIT
    replan_steps: int = 50
    camera_size: int = 360
    video_fps: int = RENDER_FPS
    loop: str = "lerobot"
    batch_size: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loop != "lerobot":
            raise ValueError(f"LeRobotProtocol.loop must be 'lerobot', got {self.loop!r}")
        if self.num_steps_wait != NUM_STEPS_WAIT:
            raise ValueError(f"LeRobot's LiberoEnv settles for {NUM_STEPS_WAIT} steps (not configurable there), "
                             f"got num_steps_wait={self.num_steps_wait}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"LeRobotProtocol.batch_size must be an int >= 1 (lerobot-eval's eval.batch_size once resolved), "
                             f"got {self.batch_size!r}")

    def steps_for(self, suite: str) -> int:
        return self.max_steps if self.max_steps is not None else LEROBOT_MAX_STEPS.get(suite, LEROBOT_DEFAULT_MAX_STEPS)


# -- the schedule -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeRobotEpisode:
    """One episode of an ``eval_policy_all`` run: where LeRobot runs it, and on what."""

    suite: str
    task: int
    index: int  # the episode's index within its task (LeRobot's per-task episode_ix)
    init_state: int  # the init state LiberoEnv puts
    seed: int  # the seed of its env's reset
    rollout: int  # LeRobot's batch_ix
    env: int  # its env within the vector env
    resets_before: int  # LiberoEnv.reset calls its env had before this episode's
    kept: bool  # among the first n_episodes (the last rollout's extra episodes run, and are dropped)

    def episode(self, start_seed: int) -> Episode:
        """fastenv's ``Episode`` for it (``init_state``: the episode index; ``seed``: the run's start seed)."""
        return Episode(self.suite, self.task, self.index, start_seed)


def lerobot_episode_list(
    suite: str | Sequence[str], tasks: Sequence[int] | Mapping[str, Sequence[int]], n_episodes: int, batch_size: int,
    start_seed: int = DEFAULT_START_SEED, *, use_async_envs: bool = True, n_init_states: int | None = None,
    include_dropped: bool = False,
) -> list[LeRobotEpisode]:
    """The episodes ``eval_policy_all`` runs for ``lerobot-eval --env.task=SUITE --env.task_ids=TASKS
    --eval.n_episodes=N --eval.batch_size=B --eval.use_async_envs=... --seed=S`` (LeRobot 0.6.1),
    in its order: suite, task, then rollout and env.

    ``batch_size`` is the resolved batch size: lerobot-eval clamps it to ``n_episodes``, and its 0
    means ``min(floor(0.7 x CPUs), n_episodes, 64)`` on the machine that ran it. ``suite`` may be a
    comma-separated list, as ``--env.task`` takes. ``n_init_states``: the init states per task (50
    in every LIBERO suite; None reads LIBERO's). A ``SyncVectorEnv`` of several envs is refused: its
    init states depend on when episodes end (the module's docstring)."""
    suites = [s.strip() for s in suite.split(",") if s.strip()] if isinstance(suite, str) else list(suite)
    for name, value in (("n_episodes", n_episodes), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be an int >= 1, got {n_episodes}")
    if batch_size == 0:
        raise ValueError("batch_size 0 is lerobot-eval's auto choice, min(floor(0.7 x CPUs), n_episodes, 64) on the machine that "
                         "ran it: give the number it resolved to")
    if start_seed is None:
        raise ValueError("start_seed None: lerobot-eval without a seed does not seed its envs, and no run repeats")
    if isinstance(start_seed, bool) or not isinstance(start_seed, int):
        raise TypeError(f"start_seed must be an int (lerobot-eval's --seed), got {start_seed!r}")
    batch_size = min(batch_size, n_episodes)  # EvalConfig.__post_init__
    if batch_size > 1 and not use_async_envs:
        raise ValueError(
            f"a SyncVectorEnv of {batch_size} envs (eval.use_async_envs=false) resets a finished env again while the others run on, "
            "and each such reset moves that env's init state on: the init states of later rollouts depend on when episodes end "
            "(huggingface/lerobot#4152), so no list fixed in advance is that run's. Use the async envs (LeRobot's default) or batch_size 1"
        )
    rollouts = math.ceil(n_episodes / batch_size)
    out: list[LeRobotEpisode] = []
    for name in suites:
        chosen = tasks.get(name, ()) if isinstance(tasks, Mapping) else tasks
        states = n_init_states
        if states is None:
            from fastenv.eval.episodes import suite_tasks

            states = suite_tasks(name)[1]
        for task in sorted({int(t) for t in chosen}):  # LeRobot's _select_task_ids sorts them
            for b in range(rollouts):
                for j in range(batch_size):
                    e = b * batch_size + j
                    if e >= n_episodes and not include_dropped:
                        continue
                    out.append(LeRobotEpisode(name, task, e, (j + b * batch_size) % states, start_seed + e, b, j, b, e < n_episodes))
    return out


def fastenv_episodes(episodes: Sequence[LeRobotEpisode], start_seed: int = DEFAULT_START_SEED) -> list[Episode]:
    """fastenv's episode list for LeRobot's kept episodes (what ``fastenv.eval.run`` makes of
    ``episodes=N, seed=start_seed`` when every index is below the task's init states)."""
    out = []
    for e in episodes:
        if not e.kept:
            continue
        if e.init_state != e.index:
            raise ValueError(f"{e.suite}/{e.task}: LeRobot's episode {e.index} runs on init state {e.init_state} (they wrap at the "
                             "task's init states): fastenv's episode list has one episode per init state")
        out.append(e.episode(start_seed))
    return out


# -- the loop ---------------------------------------------------------------------------------------


def lerobot_element(obs: Mapping[str, Any], sim: Any, language: str) -> dict[str, Any]:
    """LeRobot's ``LiberoEnv`` observation (``obs_type="pixels_agent_pos"``) of a raw LIBERO
    observation, as ``_format_raw_obs`` gives it, plus ``task``: the instruction ``rollout`` adds."""
    return {
        "pixels": {name: np.ascontiguousarray(obs[camera]) for camera, name in CAMERAS.items()},
        "robot_state": {
            "eef": {"pos": np.array(obs["robot0_eef_pos"]), "quat": np.array(obs["robot0_eef_quat"]),
                    "mat": np.array(sim.robots[0].controller.ee_ori_mat)},
            "gripper": {"qpos": np.array(obs["robot0_gripper_qpos"]), "qvel": np.array(obs["robot0_gripper_qvel"])},
            "joints": {"pos": np.array(obs["robot0_joint_pos"]), "vel": np.array(obs["robot0_joint_vel"])},
        },
        "task": str(language),
    }


class LeRobotLoop:
    """LeRobot 0.6.1's ``LiberoEnv`` episode (``reset``, ``step``, its observation) on fastenv's simulator.

    A slot holds one task's simulator; an episode starts with it seeded, its scene drawn as the
    stock env's after ``resets_before`` resets, put on the init state, settled; cameras render only
    when the element (a chunk's start) or a film reads them.
    """

    def __init__(self, protocol: Protocol) -> None:
        if protocol.loop != "lerobot":
            raise ValueError(f"LeRobotLoop runs Protocol(loop='lerobot'), got loop={protocol.loop!r}")
        self.protocol = protocol
        self.batch_size = int(getattr(protocol, "batch_size", 1))

    def build(self, suite: str, task: int) -> dict[str, Any]:
        from fastenv.backends.libero import LiberoAdapter, LiberoTask
        from fastenv.backends.libero.offscreen_env import Simulator

        if not isinstance(self.protocol, LeRobotProtocol) and self.protocol.max_steps is None and \
                MAX_STEPS.get(suite) != LEROBOT_MAX_STEPS.get(suite, LEROBOT_DEFAULT_MAX_STEPS):
            raise ValueError(f"LeRobot's {suite} episodes take up to {LEROBOT_MAX_STEPS.get(suite, LEROBOT_DEFAULT_MAX_STEPS)} steps, "
                             f"this protocol's {MAX_STEPS.get(suite)}: use fastenv.eval.lerobot_eval.LeRobotProtocol (or set max_steps)")
        spec = LiberoTask.load(suite, task)
        size = self.protocol.camera_size
        adapter = LiberoAdapter(LiberoTask(suite, -1, spec.bddl_file, None, spec.language), keys=[*CAMERAS, *STATE_KEYS],
                                camera_size=(size, size), control_freq=CONTROL_FREQ)
        return {"sim": Simulator(adapter), "states": spec.init_states, "language": spec.language}

    def begin(self, held: dict[str, Any], episode: dict[str, Any]) -> Any:
        sim = held["sim"]
        index = int(episode["init_state"])  # LeRobot's episode index within the task
        states = held["states"]
        sim.seed(int(episode["seed"]) + index)
        # LIBERO's samplers as the stock env has them: its model loaded when built, at the reset
        # LiberoEnv makes right after, and at each of the env's resets before this episode's
        sim.scene_stream = (sim.scene_stream[0], 2 + index // self.batch_size)
        sim.reset()
        obs = sim.set_init_state(states[index % len(states)])
        for _ in range(self.protocol.num_steps_wait):  # objects settle; nothing is read
            obs, _, _, _ = sim.step(list(DUMMY_ACTION))
        for robot in sim.robots:  # LeRobot's control_mode "relative"
            robot.controller.use_delta = True
        return obs

    def element(self, held: dict[str, Any], obs: Any) -> dict[str, Any]:
        return lerobot_element(obs, held["sim"], held["language"])

    def step(self, held: dict[str, Any], action: list[float]) -> tuple[Any, float, bool]:
        sim = held["sim"]
        obs, reward, done, _ = sim.step(np.asarray(action, dtype=np.float32))  # LeRobot steps the policy's float32 action
        return obs, reward, bool(done or sim.check_success())  # LiberoEnv.step's terminated

    def frame(self, obs: Any) -> np.ndarray:
        return np.ascontiguousarray(obs["agentview_image"][::-1, ::-1])  # LiberoEnv.render's frame

    def renders(self, held: dict[str, Any]) -> int:
        return held["sim"].camera_renders

    def close(self, held: dict[str, Any]) -> None:
        held["sim"].close()


# -- the policy -------------------------------------------------------------------------------------

_SUPPORTED = ("pi0", "pi05", "smolvla", "act")


def _unsupported(policy: Any, preprocessor: Any) -> str | None:
    """Why ``policy`` reads more than the observation at a chunk's start (None: it does not)."""
    name = getattr(type(policy), "name", None)
    if name not in _SUPPORTED or not type(policy).__module__.startswith(f"lerobot.policies.{name}."):
        return (f"{type(policy).__name__} ({name!r}) is not one of LeRobot's {', '.join(_SUPPORTED)}, whose select_action reads an "
                "observation only when its action queue is empty (diffusion also reads the observations before it)")
    if "select_action" in vars(policy):
        return "its select_action is replaced on the instance: what it reads is not known"
    config = policy.config
    if getattr(config, "temporal_ensemble_coeff", None) is not None:
        return "ACT with temporal ensembling predicts a chunk at every step"
    rtc = getattr(config, "rtc_config", None)
    if rtc is not None and getattr(rtc, "enabled", False):
        return "RTC is on"
    if getattr(config, "use_relative_actions", False):
        return "use_relative_actions: its postprocessor adds each step's robot state to the queued action"
    for step in getattr(preprocessor, "steps", ()):
        if type(step).__name__ == "RelativeActionsProcessorStep" and getattr(step, "enabled", False):
            return "its preprocessor has relative actions on: its postprocessor adds each step's robot state to the queued action"
    return None


def _stack(values: list[Any]) -> Any:
    """The elements' observations as a vector env batches them (a new first axis; LiberoEnv's
    observation space's dtypes: uint8 images, float64 state)."""
    if isinstance(values[0], Mapping):
        return {k: _stack([v[k] for v in values]) for k in values[0]}
    array = np.stack([np.asarray(v) for v in values])
    return array if array.dtype == np.uint8 else array.astype(np.float64, copy=False)


def _batch_size(batch: Mapping[str, Any]) -> int:
    for value in batch.values():
        if hasattr(value, "shape") and len(value.shape):
            return int(value.shape[0])
    raise ValueError("a batch without arrays")


def _take(value: Any, i: int, n: int) -> Any:
    if hasattr(value, "shape") and len(value.shape) and value.shape[0] == n:
        return value[i : i + 1]
    if isinstance(value, list) and len(value) == n:
        return value[i : i + 1]
    if isinstance(value, Mapping):
        return {k: _take(v, i, n) for k, v in value.items()}
    return value


def per_sample(policy: Any) -> Any:
    """``policy`` with ``predict_action_chunk`` run on one observation at a time (the rows of each
    batch it is given, concatenated): a batched network may give other last bits for another batch
    size; run so, each observation's chunk is the same in any batch. Returns ``policy``."""
    import torch

    predict = policy.predict_action_chunk

    def predict_action_chunk(batch: dict[str, Any], **kwargs: Any) -> Any:
        n = _batch_size(batch)
        return torch.cat([predict({k: _take(v, i, n) for k, v in batch.items()}, **kwargs) for i in range(n)])

    policy.predict_action_chunk = predict_action_chunk
    return policy


class LeRobotPolicy(BatchPolicy):
    """A LeRobot ``PreTrainedPolicy`` and its processors, run as ``lerobot-eval``'s rollout runs it.

    For a batch of requests (LeRobot observations, ``LeRobotLoop``'s elements): the batch stacked
    as a vector env stacks it, ``preprocess_observation``, ``task`` (the instructions),
    ``env_preprocessor``, ``preprocessor``, ``predict_action_chunk`` (under ``torch.inference_mode``,
    as ``select_action`` is called), its first ``n_action_steps`` rows, each row through
    ``postprocessor`` and ``env_postprocessor``: ``(n_action_steps, 7)`` float32 per request, the
    actions the queue would pop. Run it with ``policy.protocol()`` (``replan_steps`` =
    ``n_action_steps``); a request at another step is refused, as is a policy that reads more than
    the observation at a chunk's start.

    Examples:
        >>> policy = LeRobotPolicy.from_pretrained("lerobot/pi05_libero_finetuned")
        >>> fastenv.eval.run(policy, "libero_goal", episodes=10, seed=1000, protocol=policy.protocol(batch_size=10))
    """

    def __init__(self, policy: Any, preprocessor: Any, postprocessor: Any, env_preprocessor: Any = None, env_postprocessor: Any = None,
                 *, name: str | None = None, use_amp: bool | None = None, env_config: Any = None) -> None:
        why = _unsupported(policy, preprocessor)
        if why is not None:
            raise ValueError(f"LeRobotPolicy evaluates a policy that reads only the observation of a chunk's start: {why}")
        self.policy, self.preprocessor, self.postprocessor = policy, preprocessor, postprocessor
        self.env_preprocessor, self.env_postprocessor = env_preprocessor, env_postprocessor
        self.n_action_steps = int(policy.config.n_action_steps)
        self.name = name
        self.env_config = env_config  # the LIBERO env config it was built for (its camera size, episode length)
        self.use_amp = bool(getattr(policy.config, "use_amp", False)) if use_amp is None else use_amp

    @classmethod
    def from_pretrained(cls, path: str, *, env: Any = None, rename_map: Mapping[str, str] | None = None, **overrides: Any) -> LeRobotPolicy:
        """The policy at ``path`` (a directory or a Hub repo id) built as ``lerobot-eval --policy.path=PATH``
        builds it: ``make_policy`` with the LIBERO env config ``env`` (default ``LiberoEnv()``'s),
        ``make_pre_post_processors`` from the same path (the device processor set to the policy's
        device), ``make_env_pre_post_processors``. ``overrides`` set config fields (``device``,
        ``n_action_steps``, ...) as ``--policy.FIELD=VALUE`` does."""
        from pathlib import Path

        try:
            import lerobot.policies.factory  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"a LeRobot policy needs LeRobot (lerobot 0.6.1 with hf-libero, Python >= 3.12; "
                              f"bash scripts/libero_stack.sh lerobot-0.6 builds such a venv): {exc}") from exc
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.envs.configs import LiberoEnv as LiberoEnvConfig
        from lerobot.envs.factory import make_env_pre_post_processors
        from lerobot.policies.factory import make_policy, make_pre_post_processors

        cfg = PreTrainedConfig.from_pretrained(path)
        for key, value in overrides.items():
            if not hasattr(cfg, key):
                raise ValueError(f"{type(cfg).__name__} has no field {key!r}")
            setattr(cfg, key, value)
        cfg.pretrained_path = Path(path)
        env_cfg = env if env is not None else LiberoEnvConfig()
        rename = dict(rename_map or {})
        policy = make_policy(cfg=cfg, env_cfg=env_cfg, rename_map=rename)
        policy.eval()
        pre, post = make_pre_post_processors(
            policy_cfg=cfg, pretrained_path=cfg.pretrained_path,
            preprocessor_overrides={"device_processor": {"device": str(policy.config.device)},
                                    "rename_observations_processor": {"rename_map": rename}},
        )
        env_pre, env_post = make_env_pre_post_processors(env_cfg=env_cfg, policy_cfg=cfg)
        return cls(policy, pre, post, env_pre, env_post, name=str(path), env_config=env_cfg)

    def protocol(self, **overrides: Any) -> LeRobotProtocol:
        """The protocol this policy is evaluated with: ``replan_steps`` its ``n_action_steps``, the
        camera size its env config's (``from_pretrained``), and ``overrides`` (``batch_size``, ...)."""
        env_cfg = self.env_config
        base: dict[str, Any] = {"replan_steps": self.n_action_steps}
        if env_cfg is not None:
            if env_cfg.observation_height != env_cfg.observation_width:
                raise ValueError("fastenv's protocol has square cameras; the env config's are "
                                 f"{env_cfg.observation_height}x{env_cfg.observation_width}")
            base["camera_size"] = int(env_cfg.observation_height)
            if env_cfg.episode_length is not None:
                base["max_steps"] = int(env_cfg.episode_length)
        return LeRobotProtocol(**{**base, **overrides})

    def open(self, num_workers: int) -> None:
        self.policy.eval()

    def start_episode(self, episode: str, meta: Mapping[str, Any], worker: int) -> None:
        self.policy.reset()  # rollout() resets the policy before each rollout's episodes

    def infer(self, requests: Sequence[Request]) -> list[np.ndarray]:
        for r in requests:
            if "pixels" not in r.element or "robot_state" not in r.element:
                raise ValueError(f"episode {r.episode}: LeRobotPolicy reads LeRobot's observations; run it with its protocol "
                                 "(policy.protocol(), Protocol.loop 'lerobot'), got the element of another loop")
            if r.step % self.n_action_steps:
                raise ValueError(f"episode {r.episode}: a chunk asked at step {r.step}; the policy's queue empties every "
                                 f"n_action_steps={self.n_action_steps} steps: run with replan_steps={self.n_action_steps}")
        import contextlib

        import torch
        from lerobot.envs.utils import preprocess_observation
        from lerobot.utils.constants import ACTION

        device = torch.device(str(getattr(self.policy.config, "device", "cpu")))
        amp = torch.autocast(device_type=device.type) if self.use_amp else contextlib.nullcontext()
        with torch.no_grad(), amp:
            observation = preprocess_observation(_stack([{k: v for k, v in r.element.items() if k != "task"} for r in requests]))
            observation["task"] = [r.element["task"] for r in requests]
            if self.env_preprocessor is not None:
                observation = self.env_preprocessor(observation)
            observation = self.preprocessor(observation)
            with torch.inference_mode():
                chunk = self.policy.predict_action_chunk(observation)[:, : self.n_action_steps]
            if chunk.shape[1] < self.n_action_steps:
                raise ValueError(f"the policy's chunk has {chunk.shape[1]} actions, fewer than its n_action_steps={self.n_action_steps}")
            rows = []
            for t in range(self.n_action_steps):  # select_action pops (batch, action_dim) rows; rollout postprocesses each
                action = self.postprocessor(chunk[:, t])
                if self.env_postprocessor is not None:
                    action = self.env_postprocessor({ACTION: action})[ACTION]
                rows.append(action.to("cpu").numpy())
        actions = np.stack(rows, axis=1)
        return [actions[i] for i in range(len(requests))]

    def describe(self) -> dict[str, Any]:
        config = self.policy.config
        return {"form": "lerobot", "type": getattr(config, "type", type(self.policy).__name__), "name": self.name,
                "n_action_steps": self.n_action_steps, "device": str(getattr(config, "device", None))}
