"""``fastenv eval``: a whole LIBERO benchmark, sharded over worker processes, the policy batched.

The episode list (suite, task, init state, seed) is fixed before anything runs and saved with the
results; an episode's result depends on that episode only, so it is the same whatever the number
of workers, the batch size, the order episodes end in, or restarts, and any episode replays alone
(``only=``, ``fastenv eval --episode ID``). The loop each episode runs is the reference loops'
(``Protocol``: openpi's ``examples/libero/main.py`` by default); cameras render only where the
policy reads them (a chunk's start) and where a video keeps a frame. docs/eval.md is the guide.

Examples:
    >>> import fastenv.eval
    >>> if __name__ == "__main__":
    ...     config = fastenv.eval.EvalConfig(suites="libero_spatial", tasks=[0], episodes=2)
    ...     payload = fastenv.eval.run(fastenv.eval.ProjectionPolicy(), config)
"""

from fastenv.eval.config import EvalConfig
from fastenv.eval.episodes import MAX_STEPS, Episode, episode_list, parse_tasks
from fastenv.eval.policies import (
    BatchPolicy,
    CallablePolicy,
    CostlyPolicy,
    OpenpiPolicy,
    PolicyUnavailable,
    ProjectionPolicy,
    Request,
    stack_elements,
)
from fastenv.eval.protocol import Protocol, openpi_element, resize_with_pad
from fastenv.eval.runner import EvalError, format_table, run, summarize

__all__ = [
    "MAX_STEPS", "BatchPolicy", "CallablePolicy", "CostlyPolicy", "Episode", "EvalConfig", "EvalError", "OpenpiPolicy", "PolicyUnavailable",
    "ProjectionPolicy", "Protocol", "Request", "episode_list", "format_table", "openpi_element", "parse_tasks", "resize_with_pad",
    "run", "stack_elements", "summarize",
]
