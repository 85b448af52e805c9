"""``VecMonitor``: SB3's, less the step a worker restart invented and the episode it cut."""

from __future__ import annotations

import time

import numpy as np
from stable_baselines3.common.vec_env import VecMonitor as _SB3VecMonitor
from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn

from fastenv.integrations.sb3.vec_env import restarted_mask


class VecMonitor(_SB3VecMonitor):
    """SB3's ``VecMonitor``, for which a worker restart does not end an episode of the env.

    The invented transition adds nothing to the episode's return or length, and the episode the
    restart cut is not logged (no ``info["episode"]``, no CSV row, not counted): its return would
    be a partial one. Otherwise it is SB3's ``VecMonitor``.
    """

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        restarted = restarted_mask(infos, dones)
        real = ~restarted
        self.episode_returns[real] += rewards[real]
        self.episode_lengths[real] += 1
        new_infos = list(infos[:])
        for i in np.flatnonzero(dones).tolist():
            if restarted[i]:
                self.episode_returns[i] = 0
                self.episode_lengths[i] = 0
                continue
            info = infos[i].copy()
            episode_info = {"r": self.episode_returns[i], "l": self.episode_lengths[i], "t": round(time.time() - self.t_start, 6)}
            for key in self.info_keywords:
                episode_info[key] = info[key]
            info["episode"] = episode_info
            self.episode_count += 1
            self.episode_returns[i] = 0
            self.episode_lengths[i] = 0
            if self.results_writer:
                self.results_writer.write_row(episode_info)
            new_infos[i] = info
        return obs, rewards, dones, new_infos

