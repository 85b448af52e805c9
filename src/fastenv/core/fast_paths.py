"""The names of fastenv's fast paths: one enum, the keys of ``SimEnv.fast_paths()``.

Each fast path does what the simulator's own code does, with less around it, and steps aside for
that code where what it relies on does not hold (``fastenv doctor`` says which serve). A member's
value is the sentence fastenv prints and writes as a JSON key, so ``str()``, f-strings, ``repr()``
(a dict of them prints as a dict of strings) and ``json.dumps`` give the sentence, and a member
equals and hashes as its sentence: a dict read back from a results file is looked up by member.
"""

from __future__ import annotations

import enum


class FastPath(str, enum.Enum):
    """One of fastenv's fast paths (so far all LIBERO's: ``backends/libero/adapter.py``'s ``fast_paths``)."""

    # The control loop of an env step compiled with numba (backends/libero/compiled.py), checked once
    # per env against the Python loop it replaces
    COMPILED_CONTROL_LOOP = "compiled control loop"
    # robosuite's policy step (robot.control after set_goal) compiled too (policy_step.py), checked once
    # per env against robosuite's
    COMPILED_POLICY_STEP = "compiled policy step"
    # robosuite's physics loop of an env step done in Python with less around it: mj_step split around
    # the controller, each forward stage once (backends/libero/control.py); fast_substep=True
    FAST_CONTROL_LOOP = "fast control loop"
    # Only a chunk's last sub-step samples the observables (the adapter's SampleClock)
    OBSERVATION_AT_CHUNK_END = "observation at a chunk's end"
    # robosuite's reset in place, no rebuild of the sim (hard_reset=False)
    IN_PLACE_RESET = "in-place reset"
    # One MuJoCo render context per process for envs with the same assets (render_sharing.py);
    # FASTENV_SHARE_RENDER=0 turns it off
    SHARED_RENDER_CONTEXT = "shared render context"
    # robosuite's check_contact answered by geom-id masks, not name lookups (backends/libero/contacts.py)
    CONTACT_CHECK_BY_GEOM_ID = "contact check by geom id"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __repr__(self) -> str:
        return repr(self.value)
