"""What misuse of a vector env raises: Gymnasium's vector-env errors, each also the ``RuntimeError``
fastenv raised before, so code catching either keeps working."""

from __future__ import annotations

from gymnasium import error as gym_error


class AlreadyPendingCallError(RuntimeError, gym_error.AlreadyPendingCallError):
    """Actions or a reset sent to envs whose last actions are still in flight (``recv()`` them first)."""

    def __init__(self, message: str, name: str = "step") -> None:
        RuntimeError.__init__(self, message)  # (Gymnasium's __init__ needs ``name`` as well)
        self.name = name


class NoAsyncCallError(RuntimeError, gym_error.NoAsyncCallError):
    """``recv`` of envs that were sent nothing."""

    def __init__(self, message: str, name: str = "step") -> None:
        RuntimeError.__init__(self, message)
        self.name = name


class ClosedEnvironmentError(RuntimeError, gym_error.ClosedEnvironmentError):
    """A vector env used after ``close()`` (or after its workers failed more than ``max_restarts`` times)."""


class EpisodeEndedError(AssertionError, RuntimeError):
    """An action sent, with ``autoreset_mode=DISABLED``, to an env whose episode ended and that was not reset.

    Gymnasium's ``SyncVectorEnv`` fails such a step with an ``AssertionError``; fastenv raises this
    one (also a ``RuntimeError``) before anything is sent, so no env steps, even under ``python -O``.
    """
