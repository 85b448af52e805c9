"""The GPU a process renders on: the EGL device that is the same GPU as its CUDA device, matched by identity.

``MUJOCO_EGL_DEVICE_ID`` (MuJoCo's and robosuite's EGL device, LIBERO's renderer) is an index into
EGL's device list, whose order need not be CUDA's: CUDA orders its devices fastest first (or by PCI
bus with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``) and numbers only those ``CUDA_VISIBLE_DEVICES`` lists,
while EGL lists every device its vendor libraries find, NVIDIA's and Mesa's alike, in their own
order. Taking a CUDA id for an EGL index renders on another GPU, or fails. Here each process asks
both drivers and matches:

1. by UUID: EGL's ``EGL_DEVICE_UUID_EXT`` (``EGL_EXT_device_persistent_id``) against the CUDA
   device's (``cuDeviceGetUuid``; a MIG instance's parent GPU);
2. else by PCI bus id: the EGL device's DRM file (``EGL_EXT_device_drm``), through sysfs, against
   ``cuDeviceGetPCIBusId``;
3. else by ``EGL_CUDA_DEVICE_NV`` (``EGL_NV_device_cuda``), the CUDA ordinal NVIDIA's EGL gives each
   of its devices in the asking process's own numbering.

No match (an NVIDIA GPU without NVIDIA's EGL vendor library: a container without the driver's
graphics part) means the camera would render through Mesa on the CPU: one line says so, with the fix.
A CPU renderer beside a visible NVIDIA GPU is said once per process too, from the renderer the first
env reports (``note_renderer``).

Everything here is plain ctypes on the drivers' own libraries (``libcuda.so.1``, ``libEGL.so.1``);
the matching itself (``match``) is a pure function of the two device lists, tested on recorded ones.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# EGL enums (Khronos registry: EGL_EXT_device_query, _drm, _drm_render_node, _persistent_id,
# _query_name; EGL_NV_device_cuda; EGL_MESA_device_software).
EGL_EXTENSIONS = 0x3055
EGL_VENDOR = 0x3053
EGL_CUDA_DEVICE_NV = 0x323A
EGL_DRM_DEVICE_FILE_EXT = 0x3233
EGL_DRM_RENDER_NODE_FILE_EXT = 0x3377
EGL_DEVICE_UUID_EXT = 0x335C
EGL_DRIVER_NAME_EXT = 0x335E
EGL_RENDERER_EXT = 0x335F

SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "lavapipe", "swrast", "software rasterizer")
FIX_EGL = (
    "install NVIDIA's EGL vendor library (libEGL_nvidia.so.0, part of the driver's OpenGL/graphics libraries, "
    "e.g. Debian/Ubuntu's libnvidia-gl-<driver version>) with its glvnd file 10_nvidia.json in /usr/share/glvnd/egl_vendor.d; "
    "in a container, start it with NVIDIA_DRIVER_CAPABILITIES=all (or include 'graphics'); `fastenv doctor` lists what EGL finds"
)
FIX_VULKAN = (
    "point Vulkan at NVIDIA's driver: install the driver's Vulkan part (libnvidia-gl-<driver version>, nvidia_icd.json in "
    "/usr/share/vulkan/icd.d) or export VK_ICD_FILENAMES=<its nvidia_icd.json>; in a container, NVIDIA_DRIVER_CAPABILITIES=all"
)


@dataclass(frozen=True)
class CudaDevice:
    """A CUDA device as the asking process numbers it."""

    index: int
    name: str = ""
    uuid: str = ""  # "GPU-..." (or "MIG-..." for a MIG instance)
    gpu_uuid: str = ""  # the physical GPU's UUID (a MIG instance's parent; else the same as uuid)
    pci_bus_id: str = ""  # "0000:3b:00.0"

    @property
    def mig(self) -> bool:
        return self.uuid.startswith("MIG-")


@dataclass(frozen=True)
class EglDevice:
    """An entry of EGL's device list, with what the drivers say of it."""

    index: int
    extensions: tuple[str, ...] = ()
    cuda_device: int | None = None  # EGL_CUDA_DEVICE_NV
    uuid: str | None = None  # EGL_DEVICE_UUID_EXT, as "GPU-..."
    drm_file: str | None = None
    pci_bus_id: str | None = None  # from the DRM file, through sysfs
    driver: str | None = None  # EGL_DRIVER_NAME_EXT
    renderer: str | None = None  # EGL_RENDERER_EXT

    @property
    def software(self) -> bool:
        return "EGL_MESA_device_software" in self.extensions or any(s in (self.renderer or "").lower() for s in SOFTWARE_RENDERERS)

    @property
    def nvidia(self) -> bool:
        return "EGL_NV_device_cuda" in self.extensions or "nvidia" in (self.driver or "").lower()


@dataclass(frozen=True)
class Match:
    """Which EGL device renders on a CUDA device, and how that was known (or why not)."""

    egl_index: int | None
    by: str  # "uuid", "pci bus id", "EGL_CUDA_DEVICE_NV", or "" (no match)
    why: str = ""
    notes: tuple[str, ...] = field(default=())


def format_uuid(raw: bytes, prefix: str = "GPU-") -> str:
    """16 bytes as NVIDIA writes a UUID (``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``)."""
    h = bytes(raw[:16]).hex()
    return f"{prefix}{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def normal_pci(bus_id: str | None) -> str | None:
    """A PCI address in one spelling: 4-digit domain, lower case ("00000000:3B:00.0" -> "0000:3b:00.0")."""
    if not bus_id:
        return None
    m = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])", bus_id.strip())
    if m is None:
        return bus_id.strip().lower()
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def match(cuda: CudaDevice | None, cuda_index: int, egl: Sequence[EglDevice]) -> Match:
    """The EGL device that is the same GPU as CUDA device ``cuda_index`` (``cuda``: what CUDA says of
    it, where asked). By UUID, else PCI bus id, else ``EGL_CUDA_DEVICE_NV``; never by position."""
    notes = []
    if cuda is not None and cuda.mig:
        notes.append(f"CUDA device {cuda_index} is a MIG instance ({cuda.uuid}); it renders on its GPU's EGL device, "
                     "outside the MIG partition (NVIDIA's drivers give MIG instances no graphics of their own)")
    if cuda is not None and cuda.gpu_uuid:
        found = [d for d in egl if d.uuid and d.uuid.lower() == cuda.gpu_uuid.lower()]
        if len(found) == 1:
            return Match(found[0].index, "uuid", notes=tuple(notes))
    if cuda is not None and cuda.pci_bus_id:
        bus = normal_pci(cuda.pci_bus_id)
        found = [d for d in egl if d.pci_bus_id and normal_pci(d.pci_bus_id) == bus and not d.software]
        if len(found) == 1:
            return Match(found[0].index, "pci bus id", notes=tuple(notes))
    found = [d for d in egl if d.cuda_device == cuda_index]
    if len(found) == 1:
        return Match(found[0].index, "EGL_CUDA_DEVICE_NV", notes=tuple(notes))
    nvidia = [d.index for d in egl if d.nvidia]
    what = f"CUDA device {cuda_index}" + (f" ({cuda.name}, {cuda.gpu_uuid or cuda.uuid}, PCI {cuda.pci_bus_id})" if cuda else "")
    if not nvidia:
        why = (f"EGL lists no NVIDIA device ({len(egl)} device(s): "
               + (", ".join(describe_egl(d) for d in egl) or "none") + f"), so {what} has no EGL device to render on")
    else:
        why = f"none of EGL's NVIDIA devices {nvidia} is {what}"
    return Match(None, "", why, tuple(notes))


def describe_egl(device: EglDevice) -> str:
    kind = "NVIDIA" if device.nvidia else "software" if device.software else (device.driver or "other")
    return f"#{device.index} {kind}" + (f" {device.renderer}" if device.renderer else "")


# -- asking the drivers ----------------------------------------------------------------------------
def _library(name: str) -> Any:
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def cuda_devices() -> list[CudaDevice] | None:
    """The CUDA devices of this process (its ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``), from
    the driver API; None where there is no CUDA driver, [] where it sees no device. Initializes the
    CUDA driver in this process (not a context): call it where the process renders, not before a fork."""
    cuda = _library("libcuda.so.1")
    if cuda is None or cuda.cuInit(0) != 0:
        return None if cuda is None else []
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    out = []
    for i in range(count.value):
        handle = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(handle), i) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, handle)
        raw_v2, raw_v1 = ctypes.create_string_buffer(16), ctypes.create_string_buffer(16)
        v2 = getattr(cuda, "cuDeviceGetUuid_v2", None)
        got_v2 = v2 is not None and v2(raw_v2, handle) == 0
        got_v1 = cuda.cuDeviceGetUuid(raw_v1, handle) == 0
        bus = ctypes.create_string_buffer(64)
        cuda.cuDeviceGetPCIBusId(bus, 64, handle)
        gpu_uuid = format_uuid(raw_v1.raw) if got_v1 else ""
        uuid = format_uuid(raw_v2.raw) if got_v2 else gpu_uuid
        if got_v2 and got_v1 and raw_v2.raw != raw_v1.raw:
            uuid = format_uuid(raw_v2.raw, "MIG-")  # cuDeviceGetUuid_v2 gives a MIG instance's own UUID
        out.append(CudaDevice(i, name.value.decode(errors="replace"), uuid, gpu_uuid, normal_pci(bus.value.decode()) or ""))
    return out


def _drm_pci(drm_file: str | None) -> str | None:
    if not drm_file:
        return None
    try:
        return normal_pci(os.path.basename(os.path.realpath(f"/sys/class/drm/{os.path.basename(drm_file)}/device")))
    except OSError:
        return None


def egl_devices() -> list[EglDevice] | None:
    """EGL's device list (``eglQueryDevicesEXT``) with each device's identity; None where there is no
    EGL or it cannot list devices."""
    egl = _library("libEGL.so.1")
    if egl is None:
        return None
    egl.eglGetProcAddress.restype = ctypes.c_void_p
    egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
    egl.eglQueryString.restype = ctypes.c_char_p
    egl.eglQueryString.argtypes = [ctypes.c_void_p, ctypes.c_int]

    def proc(name: str, restype: Any, *argtypes: Any) -> Any:
        address = egl.eglGetProcAddress(name.encode())
        return ctypes.CFUNCTYPE(restype, *argtypes)(address) if address else None

    client = (egl.eglQueryString(None, EGL_EXTENSIONS) or b"").decode().split()
    query_devices = proc("eglQueryDevicesEXT", ctypes.c_uint, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int))
    if query_devices is None or "EGL_EXT_device_enumeration" not in client and "EGL_EXT_device_base" not in client:
        return None
    query_string = proc("eglQueryDeviceStringEXT", ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int)
    query_attrib = proc("eglQueryDeviceAttribEXT", ctypes.c_uint, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_ssize_t))
    query_binary = proc("eglQueryDeviceBinaryEXT", ctypes.c_uint, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                        ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
    count = ctypes.c_int()
    if not query_devices(0, None, ctypes.byref(count)) or count.value <= 0:
        return []
    handles = (ctypes.c_void_p * count.value)()
    query_devices(count.value, handles, ctypes.byref(count))
    out = []
    for i in range(count.value):
        device = handles[i]

        def string(name: int, device: Any = device) -> str | None:
            value = query_string(device, name) if query_string is not None else None
            return value.decode(errors="replace") if value else None

        extensions = tuple((string(EGL_EXTENSIONS) or "").split())
        cuda_device = None
        if "EGL_NV_device_cuda" in extensions and query_attrib is not None:
            value = ctypes.c_ssize_t(-1)
            if query_attrib(device, EGL_CUDA_DEVICE_NV, ctypes.byref(value)):
                cuda_device = int(value.value)
        uuid = driver = None
        if "EGL_EXT_device_persistent_id" in extensions and query_binary is not None:
            raw, size = ctypes.create_string_buffer(16), ctypes.c_int()
            if query_binary(device, EGL_DEVICE_UUID_EXT, 16, raw, ctypes.byref(size)) and size.value == 16:
                uuid = format_uuid(raw.raw)
            driver = string(EGL_DRIVER_NAME_EXT)
        renderer = string(EGL_RENDERER_EXT) if "EGL_EXT_device_query_name" in extensions else None
        if driver is None and "EGL_EXT_device_query_name" in extensions:
            driver = string(EGL_VENDOR)
        drm = string(EGL_DRM_DEVICE_FILE_EXT) if "EGL_EXT_device_drm" in extensions else None
        if drm is None and "EGL_EXT_device_drm_render_node" in extensions:
            drm = string(EGL_DRM_RENDER_NODE_FILE_EXT)
        out.append(EglDevice(i, extensions, cuda_device, uuid, drm, _drm_pci(drm), driver, renderer))
    return out


def nvidia_device_files() -> list[str]:
    """The NVIDIA GPUs of this machine, by their device files (/dev/nvidia0, /dev/nvidia1, ...)."""
    ids = [int(m.group(1)) for path in glob.glob("/dev/nvidia*") if (m := re.fullmatch(r"/dev/nvidia(\d+)", path))]
    return [str(i) for i in sorted(ids)]


def nvidia_gpu_visible(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process may use an NVIDIA GPU: the machine has one and ``CUDA_VISIBLE_DEVICES``
    does not hide them all."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None and (not listed.strip() or listed.strip().startswith("-1")):
        return False
    return bool(nvidia_device_files())


# -- choosing this process's EGL device ------------------------------------------------------------
@dataclass
class RenderChoice:
    """What ``choose_egl_device`` decided for this process."""

    egl_index: int | None = None
    by: str = ""  # how: "uuid", "pci bus id", "EGL_CUDA_DEVICE_NV", "given" (MUJOCO_EGL_DEVICE_ID set), "" (none)
    cuda: dict | None = None
    egl: list[dict] | None = None
    said: list[str] = field(default_factory=list)


_choice: RenderChoice | None = None
_renderer: dict[str, Any] | None = None
_said: set[str] = set()


def say_once(line: str) -> None:
    """One line on stderr (a RuntimeWarning), once per process."""
    if line in _said:
        return
    _said.add(line)
    warnings.warn(line, RuntimeWarning, stacklevel=3)


def choose_egl_device(environ: Any = None, cuda_index: int = 0) -> RenderChoice:
    """Set ``MUJOCO_EGL_DEVICE_ID`` to the EGL device that is this process's CUDA device ``cuda_index``
    (once per process, before MuJoCo's EGL display is made). Left as it is where the user set it, where
    no NVIDIA GPU is visible, or where MuJoCo does not render through EGL."""
    global _choice
    environ = os.environ if environ is None else environ
    if _choice is not None:
        return _choice
    choice = RenderChoice()
    if environ.get("MUJOCO_GL", "egl").lower() != "egl" or not nvidia_gpu_visible(environ):
        _choice = choice
        return choice
    egl = egl_devices() or []
    choice.egl = [asdict(d) for d in egl]
    given = environ.get("MUJOCO_EGL_DEVICE_ID")
    if given is not None and given.strip():
        choice.egl_index, choice.by = (int(given) if given.strip().isdigit() else None), "given"
    else:
        cuda_list = cuda_devices() or []
        cuda = cuda_list[cuda_index] if cuda_index < len(cuda_list) else None
        choice.cuda = asdict(cuda) if cuda is not None else None
        found = match(cuda, cuda_index, egl)
        choice.egl_index, choice.by = found.egl_index, found.by
        choice.said += list(found.notes)
        if found.egl_index is None:
            choice.said.append(f"fastenv: {found.why}: LIBERO's cameras will render on the CPU (Mesa), 50-100x slower. Fix: {FIX_EGL}")
        else:
            environ["MUJOCO_EGL_DEVICE_ID"] = str(found.egl_index)
            guard_robosuite_check(environ)
    for line in choice.said:
        say_once(line)
    _choice = choice
    return choice


# robosuite 1.4.0 and 1.4.1 assert, when robosuite.utils.binding_utils is imported, that
# MUJOCO_EGL_DEVICE_ID occurs in CUDA_VISIBLE_DEVICES as a substring: a CUDA id taken for an EGL
# index. Its EGL context reads the variable later, as an EGL index. Where the right EGL index fails
# that check, the variable is hidden while that one module is imported, and is back before any
# EGL display is made.
_ROBOSUITE_CHECK = "robosuite.utils.binding_utils"


def robosuite_check_fails(environ: Mapping[str, str]) -> bool:
    visible = environ.get("CUDA_VISIBLE_DEVICES", "")
    egl_id = environ.get("MUJOCO_EGL_DEVICE_ID")
    return visible != "" and egl_id is not None and not (egl_id.isdigit() and egl_id in visible)


class _HideDuringImport:
    """A one-module import hook: ``MUJOCO_EGL_DEVICE_ID`` is hidden while robosuite's check runs."""

    def __init__(self, environ: Any) -> None:
        self.environ = environ

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != _ROBOSUITE_CHECK:
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _HidingLoader(spec.loader, self.environ)
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        return spec


class _HidingLoader:
    """robosuite's loader, with ``MUJOCO_EGL_DEVICE_ID`` popped while the module runs."""

    def __init__(self, loader: Any, environ: Any) -> None:
        self.loader, self.environ = loader, environ

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        value = self.environ.pop("MUJOCO_EGL_DEVICE_ID", None)
        try:
            self.loader.exec_module(module)
        finally:
            if value is not None:
                self.environ["MUJOCO_EGL_DEVICE_ID"] = value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def guard_robosuite_check(environ: Any = None) -> bool:
    """Let robosuite's import-time check pass where the matched EGL index is not a CUDA id listed in
    ``CUDA_VISIBLE_DEVICES``; True where a guard was put in place."""
    environ = os.environ if environ is None else environ
    if not robosuite_check_fails(environ) or _ROBOSUITE_CHECK in sys.modules:
        return False
    if not any(isinstance(f, _HideDuringImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _HideDuringImport(environ))
    return True


# -- the renderer in use ---------------------------------------------------------------------------
def is_software(renderer: str | None) -> bool:
    return any(s in (renderer or "").lower() for s in SOFTWARE_RENDERERS)


def note_renderer(api: str, renderer: str | None, device: str | None = None) -> dict[str, Any]:
    """Record the renderer this process's first env renders with (``api``: "EGL" or "Vulkan"); where
    an NVIDIA GPU is visible and it is Mesa's CPU renderer, say so once, with the fix."""
    global _renderer
    if _renderer is None:
        _renderer = {"api": api, "renderer": renderer, "device": device, "software": is_software(renderer),
                     "egl_device": os.environ.get("MUJOCO_EGL_DEVICE_ID") if api == "EGL" else None,
                     "matched_by": _choice.by if _choice is not None and api == "EGL" else None}
        if _renderer["software"] and nvidia_gpu_visible():
            fix = FIX_EGL if api == "EGL" else FIX_VULKAN
            say_once(f"fastenv: an NVIDIA GPU is visible but this process renders on the CPU ({renderer}, {api}), "
                     f"50-100x slower than on the GPU. Fix: {fix}")
    return _renderer


def renderer_in_use() -> dict[str, Any] | None:
    """What ``note_renderer`` recorded in this process (None before its first env rendered)."""
    return None if _renderer is None else dict(_renderer)


# -- what the machine has --------------------------------------------------------------------------
EGL_VENDOR_DIRS = ("/etc/glvnd/egl_vendor.d", "/usr/share/glvnd/egl_vendor.d", "/usr/local/share/glvnd/egl_vendor.d")
VULKAN_ICD_DIRS = ("/etc/vulkan/icd.d", "/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")


def _vendor_files(variables: Sequence[str], dirs: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    for name in variables:
        if environ.get(name):
            listed = []
            for entry in environ[name].split(":"):
                listed += sorted(glob.glob(os.path.join(entry, "*.json"))) if os.path.isdir(entry) else [entry]
            return listed
    return [path for d in dirs for path in sorted(glob.glob(os.path.join(d, "*.json")))]


def _library_of(path: str, key: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            library = json.load(f)[key]["library_path"]
    except (OSError, ValueError, KeyError, TypeError):
        return {"file": path, "library": None, "loadable": False}
    return {"file": path, "library": library, "loadable": _library(library) is not None}


def vendor_libraries(environ: Mapping[str, str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The EGL vendor libraries (glvnd's JSON files) and Vulkan drivers (ICD files) this process finds,
    each with the library it names and whether it loads here."""
    environ = os.environ if environ is None else environ
    egl = _vendor_files(("__EGL_VENDOR_LIBRARY_FILENAMES", "__EGL_VENDOR_LIBRARY_DIRS"), EGL_VENDOR_DIRS, environ)
    vulkan = _vendor_files(("VK_DRIVER_FILES", "VK_ICD_FILENAMES"), VULKAN_ICD_DIRS, environ)
    return {"egl": [_library_of(p, "ICD") for p in egl], "vulkan": [_library_of(p, "ICD") for p in vulkan]}


def report() -> dict[str, Any]:
    """This process's view: its CUDA devices, EGL's device list, which EGL device each CUDA device
    renders on, and the vendor libraries found (``fastenv doctor``)."""
    cuda, egl = cuda_devices(), egl_devices()
    matches = {}
    for device in cuda or []:
        found = match(device, device.index, egl or [])
        matches[str(device.index)] = {"egl_device": found.egl_index, "by": found.by, "why": found.why, "notes": list(found.notes)}
    return {
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER"),
        "cuda": None if cuda is None else [asdict(d) for d in cuda],
        "egl": None if egl is None else [dict(asdict(d), software=d.software, nvidia=d.nvidia) for d in egl],
        "matches": matches,
        "vendor_libraries": vendor_libraries(),
    }




def record(views: Sequence[Mapping[str, str]] | None = None) -> dict[str, Any]:
    """This machine's device lists as processes with each of ``views``' environments see them (each
    asked in a fresh process: CUDA reads its variables once). Default views: as started, PCI bus
    order, and each GPU alone by index and by UUID."""
    import platform
    import subprocess

    def view(extra: Mapping[str, str]) -> dict[str, Any]:
        env = {**os.environ, **extra}
        code = "import json; from fastenv import gpus; print(json.dumps(gpus.report()))"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        if done.returncode != 0:
            return {"environment": dict(extra), "error": done.stderr[-2000:]}
        return {"environment": dict(extra), **json.loads(done.stdout.strip().splitlines()[-1])}

    if views is None:
        first = view({})
        views = [{}, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}]
        for device in first.get("cuda") or []:
            views += [{"CUDA_VISIBLE_DEVICES": str(device["index"])}, {"CUDA_VISIBLE_DEVICES": device["uuid"]}]
    return {"machine": platform.machine(), "views": [view(v) for v in views]}


__all__ = [
    "CudaDevice", "EglDevice", "Match", "RenderChoice", "choose_egl_device", "record", "cuda_devices", "egl_devices",
    "guard_robosuite_check", "match", "note_renderer", "nvidia_gpu_visible", "renderer_in_use", "report", "vendor_libraries",
]
