"""The LIBERO evaluation scripts VLA papers run, on fastenv: openpi's and OpenVLA-OFT's.

``OffScreenRenderEnv`` here takes LIBERO's ``OffScreenRenderEnv`` arguments and answers its calls
(``seed``, ``reset``, ``set_init_state``, ``step``, ``check_success``, ``env``) with the same
values, on fastenv's adapter: resets in place (bit for bit LIBERO's rebuilding hard reset),
fastenv's control loop, and observations computed key by key when read. A camera renders only
when a loop reads its image; a step whose observation nobody reads (the settling steps', those
after which the loop acts from its queue) renders nothing.

Both scripts read every step's images (to prepare them, and for their video) although their
policy reads them only when it asks for a new chunk: with the one-line change (the import), they
run on fastenv with the same actions, successes and episode lengths, rendering as much as before;
moving the observation's preparation into the branch that asks for a chunk (``patch``) renders
only what the policy reads, and their videos then hold one frame per chunk. docs/frameworks/vla-eval.md
shows both changes; ``python -m fastenv.integrations.libero_eval openpi|oft SCRIPT -- ARGS`` runs a
script with them made in memory.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from fastenv.backends.libero import offscreen_env
from fastenv.backends.libero.offscreen_env import Simulator
from fastenv.integrations._tally import Tally, announce

__all__ = ["OffScreenRenderEnv", "main", "patch"]

CAMERAS = ("agentview", "robot0_eye_in_hand")  # LIBERO's OffScreenRenderEnv default
ACCEPTED = ("bddl_file_name", "camera_heights", "camera_widths", "camera_names", "control_freq", "hard_reset")


def _one_size(value: Any, name: str) -> int:
    sizes = set(value) if isinstance(value, (list, tuple)) else {value}
    if len(sizes) != 1 or not all(isinstance(v, int) and v > 0 for v in sizes):
        raise ValueError(f"{name}: one positive int for every camera, got {value!r}")
    return sizes.pop()


class LiberoEvalEnv(Simulator):
    """LIBERO's ``OffScreenRenderEnv`` on fastenv (built by ``OffScreenRenderEnv``)."""

    @property
    def language_instruction(self) -> str:
        return self._adapter._env.language_instruction


def OffScreenRenderEnv(**kwargs: Any) -> LiberoEvalEnv:
    """LIBERO's ``OffScreenRenderEnv(**kwargs)`` on fastenv.

    Takes ``bddl_file_name``, ``camera_heights``, ``camera_widths``, ``camera_names``,
    ``control_freq`` and ``hard_reset`` (True, LIBERO's default: fastenv's in-place reset equals it);
    any other argument is refused, naming it, before anything is built.

    Examples:
        >>> env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=256, camera_widths=256)
    """
    from fastenv.backends.libero import LiberoAdapter, LiberoTask

    unknown = sorted(set(kwargs) - set(ACCEPTED))
    if unknown:
        raise ValueError(f"OffScreenRenderEnv on fastenv takes {list(ACCEPTED)}; got also {unknown}")
    if "bddl_file_name" not in kwargs:
        raise ValueError("OffScreenRenderEnv needs bddl_file_name, the task's BDDL file")
    if kwargs.get("hard_reset", True) is not True:
        raise ValueError("hard_reset=False: fastenv resets in place already, equal to LIBERO's hard reset; LIBERO's soft reset "
                         "(which may differ from it) is not reproduced. Leave hard_reset at True")
    height = _one_size(kwargs.get("camera_heights", 128), "camera_heights")
    width = _one_size(kwargs.get("camera_widths", 128), "camera_widths")
    cameras = kwargs.get("camera_names", list(CAMERAS))
    cameras = [cameras] if isinstance(cameras, str) else list(cameras)
    bddl = str(kwargs["bddl_file_name"])
    adapter = LiberoAdapter(LiberoTask("", -1, bddl, None, ""), keys=None, camera_size=(height, width),
                            control_freq=kwargs.get("control_freq"))
    if tuple(cameras) != CAMERAS:
        state = [k for k in adapter.keys if adapter._image_kind(k) is None]
        adapter.select_keys([f"{cam}_image" for cam in cameras] + state)
    return LiberoEvalEnv(adapter)


# -- the scripts' loops: observations prepared only when the policy asks for a chunk ------------------

# (anchor, replacement): each anchor must occur exactly once in the script's source.
_OPENPI_BLOCK_START = "                    # Get preprocessed image\n"
_OPENPI_QUERY = "                    if not action_plan:\n"
_OFT_BLOCK = ("            # Prepare observation\n"
              "            observation, img = prepare_observation(obs, resize_size)\n"
              "            replay_images.append(img)\n\n")
_OFT_QUERY = "            if len(action_queue) == 0:\n"


def _once(source: str, anchor: str, script: str) -> int:
    count = source.count(anchor)
    if count != 1:
        raise ValueError(f"{script}: expected this line once, found it {count} times (another version of the script?):\n{anchor}")
    return source.index(anchor)


def _indent(block: str, by: str = "    ") -> str:
    return "".join(by + line if line.strip() else line for line in block.splitlines(keepends=True))


def patch(source: str, script: str) -> str:
    """``script``'s loop ("openpi": examples/libero/main.py; "oft": run_libero_eval.py) with the
    observation prepared only when the policy asks for a chunk, and the video frame kept then."""
    if script == "openpi":
        start, query = _once(source, _OPENPI_BLOCK_START, script), _once(source, _OPENPI_QUERY, script)
        if not start < query:
            raise ValueError("openpi: the image preparation is expected before `if not action_plan:`")
        block = source[start:query]
        return source[:start] + _OPENPI_QUERY + _indent(block) + source[query + len(_OPENPI_QUERY):]
    if script == "oft":
        start, query = _once(source, _OFT_BLOCK, script), _once(source, _OFT_QUERY, script)
        if not start < query:
            raise ValueError("oft: prepare_observation is expected before `if len(action_queue) == 0:`")
        between = source[start + len(_OFT_BLOCK):query]
        return source[:start] + between + _OFT_QUERY + _indent(_OFT_BLOCK.rstrip("\n") + "\n") + source[query + len(_OFT_QUERY):]
    raise ValueError(f"unknown script {script!r}: expected 'openpi' or 'oft'")


def use_fastenv_env() -> None:
    """LIBERO's ``OffScreenRenderEnv`` is fastenv's for every script imported from now on."""
    import importlib

    from fastenv.backends.libero.task import import_libero, package

    import_libero()  # LIBERO imported as fastenv imports it (its OpenGL platform chosen first)
    name = package()
    # this module by its name, also when run as __main__
    canonical = importlib.import_module("fastenv.integrations.libero_eval")
    importlib.import_module(f"{name}.{name}.envs").OffScreenRenderEnv = canonical.OffScreenRenderEnv


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m fastenv.integrations.libero_eval openpi|oft SCRIPT [--renders read|all] -- ARGS``"""
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m fastenv.integrations.libero_eval", description=__doc__.splitlines()[0])
    parser.add_argument("script", choices=["openpi", "oft"])
    parser.add_argument("path", help="openpi's examples/libero/main.py, or OpenVLA-OFT's experiments/robot/libero/run_libero_eval.py")
    parser.add_argument("--renders", choices=["read", "all"], default="read",
                        help="read (default): prepare observations only when the policy asks for a chunk; all: the script's loop unchanged")
    args = parser.parse_args(argv)
    entry = f"{os.path.basename(args.path)} ({args.script}) via python -m fastenv.integrations.libero_eval"
    announce(entry, "LIBERO's OffScreenRenderEnv is fastenv's (same data); " + (
        "observations are prepared only when the policy asks for a chunk" if args.renders == "read" else "the script's loop unchanged (--renders all)"))
    use_fastenv_env()
    with open(args.path) as fh:
        source = fh.read()
    if args.renders == "read":
        source = patch(source, args.script)
    sys.argv = [args.path, *rest]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.path)))  # as `python SCRIPT` puts it
    try:
        exec(compile(source, args.path, "exec"), {"__name__": "__main__", "__file__": args.path})  # noqa: S102 (the user's script)
    finally:
        tally = Tally()
        tally.add_images(offscreen_env.PROCESS["stock"], offscreen_env.PROCESS["rendered"])
        tally.add_paths(offscreen_env.PATHS.values())
        tally.say(entry)


if __name__ == "__main__":
    main()
