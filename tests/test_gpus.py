"""The EGL device each process renders on is the GPU CUDA names for it, matched by identity; a CPU
renderer beside a visible NVIDIA GPU is never silent.

The matching runs on recorded device lists: what CUDA's driver API and EGL's device queries return on
machines whose EGL order differs from CUDA's, with a subset visible, with MIG, with a GPU that has no
EGL device, and (``tests/data/gpus/*.json``) the lists read off real machines by
``python -m fastenv.gpus --record``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fastenv import gpus
from fastenv.gpus import CudaDevice, EglDevice, match

DATA = Path(__file__).parent / "data" / "gpus"
NV_EXT = ("EGL_NV_device_cuda", "EGL_EXT_device_drm", "EGL_EXT_device_persistent_id", "EGL_EXT_device_query_name")
MESA = EglDevice(0, ("EGL_MESA_device_software", "EGL_EXT_device_drm_render_node"), renderer="llvmpipe (LLVM 15.0.6, 256 bits)")


def uuid(n: int) -> str:
    return f"GPU-{n:08x}-1111-2222-3333-{n:012x}"


def pci(bus: int) -> str:
    return f"0000:{bus:02x}:00.0"


# Eight GPUs by PCI bus; EGL lists NVIDIA's devices in its own order (as on the 7-GPU machine of
# google-deepmind/mujoco#3245, where EGL index 2 was CUDA's GPU 0), after Mesa's software device.
BUSES = [0x1B, 0x1C, 0x3D, 0x3E, 0x89, 0x8A, 0xB1, 0xB2]
EGL_ORDER = [2, 1, 0, 5, 4, 7, 6, 3]  # EGL's k-th NVIDIA device is physical GPU EGL_ORDER[k]


def machine(visible: list[int], *, persistent_id: bool = True, drm: bool = True, cuda_ext: bool = True, mesa_first: bool = True) -> list[EglDevice]:
    """EGL's list on the 8-GPU machine as a process with these physical GPUs visible (in its CUDA
    order) sees it: EGL_CUDA_DEVICE_NV is the device's ordinal in that process's numbering, -1 if hidden."""
    devices = [MESA] if mesa_first else []
    for physical in EGL_ORDER:
        ext = tuple(e for e in NV_EXT if (e != "EGL_EXT_device_persistent_id" or persistent_id) and (e != "EGL_EXT_device_drm" or drm)
                    and (e != "EGL_NV_device_cuda" or cuda_ext))
        devices.append(EglDevice(
            len(devices), ext,
            cuda_device=(visible.index(physical) if physical in visible else -1) if cuda_ext else None,
            uuid=uuid(physical) if persistent_id else None,
            drm_file=f"/dev/dri/card{physical + 1}" if drm else None,
            pci_bus_id=pci(BUSES[physical]) if drm else None,
            driver="NVIDIA" if persistent_id else None,
        ))
    return devices


def cuda(visible: list[int]) -> list[CudaDevice]:
    return [CudaDevice(i, "NVIDIA A100-SXM4-80GB", uuid(p), uuid(p), pci(BUSES[p])) for i, p in enumerate(visible)]


def egl_index_of(physical: int, devices: list[EglDevice]) -> int:
    return next(d.index for d in devices if d.uuid == uuid(physical) or d.pci_bus_id == pci(BUSES[physical]))


@pytest.mark.parametrize("visible", [list(range(8)), [3], [6, 2], [7, 0, 5], [4, 1]])
@pytest.mark.parametrize("what", ["all", "uuid only", "pci only", "EGL_CUDA_DEVICE_NV only"])
def test_each_cuda_device_renders_on_its_own_gpu(visible, what):
    egl = machine(visible, persistent_id=what in ("all", "uuid only"), drm=what in ("all", "pci only"),
                  cuda_ext=what in ("all", "EGL_CUDA_DEVICE_NV only"))
    for device in cuda(visible):
        known = None if what == "EGL_CUDA_DEVICE_NV only" else device  # a process that did not ask CUDA
        found = match(known, device.index, egl)
        physical = visible[device.index]
        assert found.egl_index == next(d.index for d in egl[1:] if EGL_ORDER[d.index - 1] == physical), (what, visible, device)
        assert found.by == {"all": "uuid", "uuid only": "uuid", "pci only": "pci bus id", "EGL_CUDA_DEVICE_NV only": "EGL_CUDA_DEVICE_NV"}[what]


def test_robosuites_rule_renders_on_another_gpu_on_this_machine():
    # robosuite 1.4 takes CUDA_VISIBLE_DEVICES=3's "3" (or MUJOCO_EGL_DEVICE_ID) for an EGL index:
    # on this machine, EGL's device 3 is physical GPU 0; the match is EGL device 8, GPU 3's own.
    egl = machine([3])
    assert EGL_ORDER[3 - 1] == 0 and egl[3].uuid == uuid(0)
    assert match(cuda([3])[0], 0, egl).egl_index == 8 and egl[8].uuid == uuid(3)


def test_cuda_fastest_first_order_is_not_pci_order():
    # CUDA_DEVICE_ORDER=FASTEST_FIRST (CUDA's default) put the faster GPU on the higher bus first:
    # CUDA device 0 is physical GPU 5. The match follows CUDA's own numbering, not the bus order.
    visible = [5, 2]
    egl = machine(visible)
    assert match(cuda(visible)[0], 0, egl).egl_index == egl_index_of(5, egl)
    assert match(cuda(visible)[1], 1, egl).egl_index == egl_index_of(2, egl)


def test_a_mig_instance_renders_on_its_gpu_and_says_so():
    egl = machine(list(range(8)))
    mig = CudaDevice(0, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "MIG-0badc0de-1111-2222-3333-444455556666", uuid(3), pci(BUSES[3]))
    found = match(mig, 0, egl)
    assert found.egl_index == egl_index_of(3, egl) and found.by == "uuid"
    assert "MIG instance" in found.notes[0]
    # without the parent's UUID (an older driver), its PCI bus id is the GPU's
    found = match(CudaDevice(0, "MIG", mig.uuid, "", pci(BUSES[3])), 0, egl)
    assert found.egl_index == egl_index_of(3, egl) and found.by == "pci bus id"


def test_a_gpu_without_an_egl_device_is_no_match_and_names_what_egl_has():
    found = match(cuda([0])[0], 0, [MESA])  # a container without NVIDIA's EGL vendor library
    assert found.egl_index is None and found.by == ""
    assert "EGL lists no NVIDIA device" in found.why and "#0 software llvmpipe" in found.why
    # NVIDIA's EGL is there but this GPU is not among its devices (one GPU's device not mounted)
    egl = [d for d in machine([0, 1]) if d.uuid != uuid(1)]
    found = match(cuda([0, 1])[1], 1, egl)
    assert found.egl_index is None and "none of EGL's NVIDIA devices" in found.why
    # Mesa's device on the same PCI bus (a DRM device of an NVIDIA GPU) is never the match
    software_twin = EglDevice(0, ("EGL_MESA_device_software", "EGL_EXT_device_drm"), drm_file="/dev/dri/card1", pci_bus_id=pci(BUSES[0]))
    assert match(cuda([0])[0], 0, [software_twin]).egl_index is None


def test_pci_bus_ids_in_any_spelling():
    assert gpus.normal_pci("00000000:3B:00.0") == "0000:3b:00.0" == gpus.normal_pci("0000:3b:00.0") == gpus.normal_pci("3b:00.0")
    assert gpus.format_uuid(bytes(range(16))) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")), ids=lambda p: p.stem)
def test_recorded_machines(path):
    """Each real machine's recording: the match computed from its device lists is the one recorded
    there, and it is the EGL device whose UUID or PCI bus id is the CUDA device's."""
    recorded = json.loads(path.read_text())
    for view in recorded["views"]:
        egl = [EglDevice(**{k: tuple(v) if k == "extensions" else v for k, v in d.items() if k in EglDevice.__dataclass_fields__})
               for d in view["egl"] or []]
        for device in view["cuda"] or []:
            cuda_device = CudaDevice(**device)
            found = match(cuda_device, cuda_device.index, egl)
            assert found.egl_index == view["matches"][str(cuda_device.index)]["egl_device"], (path.name, view["CUDA_VISIBLE_DEVICES"])
            chosen = egl[found.egl_index]
            assert chosen.uuid == cuda_device.gpu_uuid or gpus.normal_pci(chosen.pci_bus_id) == gpus.normal_pci(cuda_device.pci_bus_id)


# -- choosing this process's device ----------------------------------------------------------------
@pytest.fixture
def fresh(monkeypatch):
    """A process that has chosen nothing and rendered nothing yet, with one visible NVIDIA GPU faked."""
    monkeypatch.setattr(gpus, "_choice", None)
    monkeypatch.setattr(gpus, "_renderer", None)
    monkeypatch.setattr(gpus, "_said", set())
    monkeypatch.setattr(gpus, "nvidia_device_files", lambda: ["0", "1", "2", "3", "4", "5", "6", "7"])
    return monkeypatch


def test_choosing_sets_the_matched_egl_index_and_lets_robosuites_check_pass(fresh):
    visible = [6]
    fresh.setattr(gpus, "egl_devices", lambda: machine(visible))
    fresh.setattr(gpus, "cuda_devices", lambda: cuda(visible))
    environ = {"MUJOCO_GL": "egl", "CUDA_VISIBLE_DEVICES": "6"}
    choice = gpus.choose_egl_device(environ)
    assert choice.by == "uuid" and environ["MUJOCO_EGL_DEVICE_ID"] == str(egl_index_of(6, machine(visible))) == "7"
    assert gpus.robosuite_check_fails(environ)  # "7" is not in "6": robosuite 1.4 would refuse at import
    assert any(isinstance(f, gpus._HideDuringImport) for f in sys.meta_path) or "robosuite.utils.binding_utils" in sys.modules
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, gpus._HideDuringImport)]
    assert gpus.choose_egl_device({"MUJOCO_GL": "egl"}) is choice  # once per process


def test_a_users_egl_device_is_kept(fresh):
    fresh.setattr(gpus, "egl_devices", lambda: machine([0]))
    fresh.setattr(gpus, "cuda_devices", lambda: pytest.fail("CUDA is not asked when the user chose the EGL device"))
    environ = {"MUJOCO_GL": "egl", "MUJOCO_EGL_DEVICE_ID": "3"}
    assert gpus.choose_egl_device(environ).by == "given" and environ["MUJOCO_EGL_DEVICE_ID"] == "3"


@pytest.mark.parametrize("environ", [{"MUJOCO_GL": "osmesa"}, {"MUJOCO_GL": "egl", "CUDA_VISIBLE_DEVICES": "-1"},
                                     {"MUJOCO_GL": "egl", "CUDA_VISIBLE_DEVICES": ""}])
def test_nothing_is_chosen_without_egl_or_a_visible_gpu(fresh, environ):
    fresh.setattr(gpus, "egl_devices", lambda: pytest.fail("EGL is not asked"))
    assert gpus.choose_egl_device(dict(environ)).by == ""


def test_no_egl_device_for_the_gpu_is_said_once_with_the_fix(fresh):
    fresh.setattr(gpus, "egl_devices", lambda: [MESA])
    fresh.setattr(gpus, "cuda_devices", lambda: cuda([0]))
    environ = {"MUJOCO_GL": "egl"}
    with pytest.warns(RuntimeWarning, match=r"EGL lists no NVIDIA device.*render on the CPU \(Mesa\).*libEGL_nvidia\.so\.0"):
        gpus.choose_egl_device(environ)
    assert "MUJOCO_EGL_DEVICE_ID" not in environ


def test_a_cpu_renderer_beside_a_visible_gpu_is_said_once(fresh):
    with pytest.warns(RuntimeWarning, match=r"NVIDIA GPU is visible but this process renders on the CPU \(llvmpipe.*Fix: install NVIDIA's EGL"):
        gpus.note_renderer("EGL", "llvmpipe (LLVM 15.0.6, 256 bits)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gpus.note_renderer("EGL", "llvmpipe (LLVM 15.0.6, 256 bits)")  # once per process
    assert gpus.renderer_in_use()["software"] is True


@pytest.mark.parametrize(("api", "renderer"), [("EGL", "NVIDIA H100 80GB HBM3/PCIe/SSE2"), ("Vulkan", "NVIDIA H100 80GB HBM3")])
def test_a_gpu_renderer_says_nothing(fresh, api, renderer):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gpus.note_renderer(api, renderer)["software"] is False


def test_a_vulkan_cpu_renderer_gets_the_vulkan_fix(fresh):
    with pytest.warns(RuntimeWarning, match=r"\(lavapipe, Vulkan\).*VK_ICD_FILENAMES"):
        gpus.note_renderer("Vulkan", "lavapipe")


def test_without_a_gpu_a_cpu_renderer_is_expected(fresh):
    fresh.setattr(gpus, "nvidia_device_files", lambda: [])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        noted = gpus.note_renderer("EGL", "llvmpipe (LLVM 15.0.6, 256 bits)")
    assert [str(w.message) for w in said] == []  # no GPU: nothing to say
    assert noted["software"] is True and gpus.renderer_in_use() == noted


@pytest.mark.libero
def test_a_real_libero_env_on_the_cpu_beside_a_faked_gpu_says_so(fresh):
    """A real LIBERO env built here (Mesa's llvmpipe) in a process that believes an NVIDIA GPU is
    visible: the line comes at the first env, with the fix; the env reports its renderer."""
    import gymnasium as gym

    fresh.setattr(gpus, "_choice", gpus.RenderChoice())  # the device choice is the test above's
    with pytest.warns(RuntimeWarning, match=r"renders on the CPU \(llvmpipe"):
        env = gym.make("fastenv/Libero-v0", suite="libero_goal", task_id=0, camera_size=32, modalities=("agentview_image",))
    try:
        seen = env.unwrapped.renderer()
        assert seen["api"] == "EGL" and "llvmpipe" in seen["renderer"] and seen["software"] and seen["pid"] == os.getpid()
    finally:
        env.close()


# -- robosuite's import-time check -----------------------------------------------------------------
ROBOSUITE_IMPORT = """
import os, sys
from fastenv import gpus
os.environ.update(MUJOCO_GL="egl", PYOPENGL_PLATFORM="egl", CUDA_VISIBLE_DEVICES="3", MUJOCO_EGL_DEVICE_ID="0")
if sys.argv[1] == "guarded":
    assert gpus.guard_robosuite_check()
import robosuite.utils.binding_utils
assert os.environ["MUJOCO_EGL_DEVICE_ID"] == "0"
{render}
print("imported")
"""
RENDER = """
from robosuite.utils.binding_utils import MjRenderContextOffscreen, MjSim
import mujoco, numpy as np
sim = MjSim(mujoco.MjModel.from_xml_string('<mujoco><worldbody><light pos="0 0 2"/><geom size=".1"/><camera name="c" pos="0 0 1"/></worldbody></mujoco>'))
sim.add_render_context(MjRenderContextOffscreen(sim, device_id=-1))
image = sim.render(width=32, height=32, camera_name="c")
assert image.shape == (32, 32, 3) and image.any()
"""


@pytest.mark.libero
@pytest.mark.parametrize("stack", ["robosuite 1.4.0 (this environment)", "robosuite 1.4.1 (RLinf's stack)"])
def test_robosuites_import_time_check_passes_with_an_egl_index_it_would_refuse(stack):
    # CUDA_VISIBLE_DEVICES=3 with EGL device 0: robosuite asserts "0" in "3" at import. Guarded, the
    # import passes, the variable is back, and the EGL context renders on device 0.
    if "1.4.1" in stack:
        from test_libero_stacks import _rlinf_python

        python = str(_rlinf_python())
    else:
        python = sys.executable
    code = ROBOSUITE_IMPORT.replace("{render}", RENDER)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    refused = subprocess.run([python, "-c", code, "plain"], capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode != 0 and "MUJOCO_EGL_DEVICE_ID needs to be set to one of the device id" in refused.stderr
    guarded = subprocess.run([python, "-c", code, "guarded"], capture_output=True, text=True, env=env, timeout=300)
    assert guarded.returncode == 0 and guarded.stdout.strip().endswith("imported"), guarded.stderr[-2000:]


def test_vendor_libraries_are_listed_from_the_loaders_variables(tmp_path):
    nvidia = tmp_path / "10_nvidia.json"
    nvidia.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": "libEGL_nvidia.so.0"}}))
    icd = tmp_path / "nvidia_icd.json"
    icd.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.3"}}))
    found = gpus.vendor_libraries({"__EGL_VENDOR_LIBRARY_FILENAMES": str(nvidia), "VK_ICD_FILENAMES": str(icd)})
    assert found["egl"] == [{"file": str(nvidia), "library": "libEGL_nvidia.so.0", "loadable": False}]
    assert found["vulkan"] == [{"file": str(icd), "library": "libGLX_nvidia.so.0", "loadable": False}]
    here = gpus.vendor_libraries({"__EGL_VENDOR_LIBRARY_DIRS": str(tmp_path)})
    assert [e["library"] for e in here["egl"]] == ["libEGL_nvidia.so.0", "libGLX_nvidia.so.0"]  # every JSON of the folder


def test_this_machines_report_is_json_and_matches_every_cuda_device():
    report = gpus.report()
    json.dumps(report)
    assert set(report) >= {"cuda", "egl", "matches", "vendor_libraries"}
    for index, found in report["matches"].items():
        assert found["egl_device"] is not None or found["why"], index


# -- the figures measured on a GPU server ----------------------------------------------------------
def test_the_gpu_server_figures_in_the_docs_are_the_committed_jsons():
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "gpu-servers.md").read_text()
    measured = json.loads((root / "results" / "bench_gpu_server_h100.json").read_text())
    parts = measured["parts"]
    runs = [parts["libero"]["fastenv_bench"], measured["extra_runs"]["libero_16_envs_8_workers"]["fastenv_bench"]]
    for run in runs:
        for row in run["results"]:
            assert f"| {row['env_steps_per_s']:.1f} | {row['speedup_vs_default']:.2f} |" in page, row["config"]
            # every worker rendered on the GPU, matched by identity
            assert all(w["renderer"].startswith("NVIDIA H100") and not w["software"] for w in row["renderer_per_worker"])
    for rows in (parts["memory"]["shared render context"]["rows"], parts["memory"]["a render context per env"]["rows"]):
        for row in rows[1:]:
            assert f"{row['process_gpu_mb']:.0f} MB" in page
    for row in parts["rlinf"]["bench_rlinf_stages"]["rows"]:
        assert f"| {row['env']['env_steps_per_s']:.1f} | {row['vla']['env_steps_per_s']:.1f} |" in page
    for row in parts["maniskill"]["bench_maniskill"]["single"]:
        assert f"{row['ms_per_step']:.2f}" in page and row["render_device"]["is_cuda"]
        assert row["render_device"]["pci_string"] == measured["parts"]["devices"]["gpus"]["views"][0]["cuda"][0]["pci_bus_id"]
    for view in parts["devices"]["gpus"]["views"]:
        assert view["matches"]["0"] == {"egl_device": 0, "by": "uuid", "why": "", "notes": []}


def test_bench_records_each_workers_renderer_once():
    from fastenv.bench.report import per_worker, renderer_line

    seen = [{"pid": 1, "api": "EGL", "renderer": "NVIDIA H100 80GB HBM3/PCIe/SSE2", "software": False}] * 2
    seen += [{"pid": 2, "api": "EGL", "renderer": "llvmpipe (LLVM 15.0.6, 256 bits)", "software": True}] * 2
    workers = per_worker(seen)
    assert [w["pid"] for w in workers] == [1, 2]
    line = renderer_line([{"config": "Default", "renderer_per_worker": workers}])
    assert line == ("renderer per worker: Default: 1 x NVIDIA H100 80GB HBM3/PCIe/SSE2 (EGL), "
                    "1 x llvmpipe (LLVM 15.0.6, 256 bits) (EGL, CPU)")
    assert renderer_line([{"config": "A", "renderer_per_worker": workers[:1]}]).startswith("renderer: every worker")
