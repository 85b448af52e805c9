"""`fastenv doctor`: what this machine gives the fast paths, and for each that does not serve, why and what to do."""

import json
import os
import subprocess
import sys

import pytest

from fastenv.core.fast_paths import FastPath
from fastenv.doctor import advice


def doctor(*args, **env):
    run = subprocess.run([sys.executable, "-m", "fastenv.cli", "doctor", *args], capture_output=True, text=True, timeout=600,
                         env={**os.environ, **env})
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.mark.libero
def test_doctor_builds_an_env_and_says_which_fast_paths_serve_and_why_one_does_not(tmp_path):
    # One path turned off by its switch: the doctor names it, with the switch to change; the others serve.
    out = tmp_path / "doctor.json"
    run = doctor("--json", str(out), FASTENV_SHARE_RENDER="0")
    report = json.loads(out.read_text())
    paths = report["libero env"]["fast_paths"]
    assert set(paths) >= {FastPath.COMPILED_CONTROL_LOOP, FastPath.COMPILED_POLICY_STEP, FastPath.FAST_CONTROL_LOOP,
                          FastPath.OBSERVATION_AT_CHUNK_END, FastPath.IN_PLACE_RESET, FastPath.SHARED_RENDER_CONTEXT,
                          FastPath.CONTACT_CHECK_BY_GEOM_ID}
    assert [p for p, on in paths.items() if not on] == [FastPath.SHARED_RENDER_CONTEXT]
    assert report["libero env"]["aside"][FastPath.SHARED_RENDER_CONTEXT]["do"].startswith("FASTENV_SHARE_RENDER=0 is set")
    assert "ASIDE   shared render context" in run.stdout and "do:  FASTENV_SHARE_RENDER=0 is set: unset it" in run.stdout
    assert "serves  compiled policy step" in run.stdout
    # the machine's facts: numpy's BLAS and the kernel set it runs, numba's target, its cache for this CPU
    blas = report["compiled loop"]["blas"]
    assert blas["vendor"] == "openblas" and blas["core_type"] and blas["np.dot equal"] is True
    assert f"{blas['core_type']} kernels" in run.stdout
    assert report["compiled loop"]["convolve_form"] == "sequential"
    assert report["compiled loop"]["cache"]["complete"] is True and "holds the control loop compiled for this CPU" in run.stdout
    assert report["maniskill"]["installed"] is False or "ManiSkill" in run.stdout
    assert "steps aside" not in run.stderr
    # what renders: the env's renderer (here Mesa's, no GPU), EGL's devices and the vendor libraries found
    assert report["libero env"]["render"]["api"] == "EGL" and report["libero env"]["render"]["renderer"]
    render = report["render devices"]
    assert render["egl"] and render["vendor_libraries"]["egl"] and "  EGL       devices: #0" in run.stdout
    assert "  vendors   EGL: " in run.stdout


@pytest.mark.libero
def test_doctor_without_an_env_names_a_forced_blas_kernel_set():
    run = doctor("--no-env", OPENBLAS_CORETYPE="Nehalem")
    assert "Nehalem kernels, forced by OPENBLAS_CORETYPE=Nehalem" in run.stdout
    assert "fast paths of a LIBERO env" not in run.stdout


def test_advice_names_what_to_change_from_the_line_a_path_said():
    line = ("fastenv: the compiled control loop steps aside for robosuite's own code: np.dot differs from scipy_cblas_dgemv64_ of "
            "libopenblas.so (a 6x6 C-ordered matrix)")
    said = advice(FastPath.COMPILED_CONTROL_LOOP, [line, "fastenv: the contact check by geom id steps aside for robosuite's own code: ..."])
    assert said["why"] == line and "numpy's own wheel" in said["do"]
    numba = advice(FastPath.COMPILED_CONTROL_LOOP, ["fastenv: the compiled control loop steps aside for robosuite's own code: numba is not installed; ..."])
    assert numba["do"].startswith("install numba: ") and "[numba]" in numba["do"]
    assert advice(FastPath.IN_PLACE_RESET, [])["do"].startswith("hard_reset=True was asked for")  # a switch, not a step-aside
