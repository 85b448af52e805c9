"""What a benchmark run shows: its progress bar, its tables, its figure, and where its JSON goes."""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastenv.bench.clock import RunClock

# The ablation's breakdown of a row's time, in the table's order.
CATEGORIES = ("physics", "step", "observe", "reset", "transport_wait", "policy")


def output_file(out: str | Path, name: str) -> Path:
    """The JSON file ``--out`` names: ``out`` itself where it names a ``.json`` file, else ``name``
    in the folder ``out``. Anything else already there (a file that is not JSON) is refused.

    Examples:
        >>> output_file("results", "fastenv_bench.json"), output_file("runs/today.json", "fastenv_bench.json")
        (PosixPath('results/fastenv_bench.json'), PosixPath('runs/today.json'))
    """
    path = Path(out)
    if path.is_dir():
        return path / name
    if path.suffix.lower() == ".json":
        return path
    if path.exists():
        raise ValueError(f"out must be a folder or a .json file; {str(out)!r} is a file of another kind")
    return path / name


def per_worker(renderers: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each env process's renderer once (``SimEnv.renderer`` of each env, several envs per worker)."""
    return list({r["pid"]: r for r in renderers}.values())


def renderer_line(rows: list[dict[str, Any]]) -> str:
    """What each configuration's workers rendered with (their last round), as one line."""
    def name(w: dict[str, Any]) -> str:
        return f"{w.get('renderer') or 'unknown'} ({w.get('api') or '?'}{', CPU' if w.get('software') else ''})"

    names = {name(w) for r in rows for w in r.get("renderer_per_worker", [])}
    if len(names) == 1:
        return f"renderer: every worker of every configuration rendered with {names.pop()}"
    parts = []
    for r in rows:
        seen = collections.Counter(name(w) for w in r.get("renderer_per_worker", []))
        parts.append(f"{r['config']}: " + ", ".join(f"{n} x {k}" for k, n in seen.items()))
    return "renderer per worker: " + "; ".join(parts)


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


class ProgressBar:
    """The run's progress bar: its share done and time left come from the ``RunClock`` (what each
    configuration costs here), not from counted steps; every estimate is kept in the clock's history."""

    NOTE_EVERY_S = 5.0

    def __init__(self, clock: RunClock) -> None:
        from tqdm import tqdm

        self.clock, self.label, self.last_shown, self.last_note = clock, "", -math.inf, -math.inf
        self.tqdm = tqdm(total=1000, desc="fastenv bench", bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}{postfix}",
                         mininterval=1.0)

    def show(self, label: str | None = None, force: bool = False) -> None:
        now = time.perf_counter()
        if label is not None:
            self.label = label
        if not force and now - self.last_shown < 1.0:
            return
        self.last_shown = now
        if force or now - self.last_note >= self.NOTE_EVERY_S:
            self.last_note = now
            total = self.clock.note(now)
        else:
            total = self.clock.total(now)
        elapsed = now - (self.clock.started or now)
        if total:
            self.tqdm.n = min(1000, int(1000 * elapsed / total))
            self.tqdm.set_postfix_str(f"about {minutes(max(0.0, total - elapsed))} left; {self.label}", refresh=False)
        else:
            self.tqdm.set_postfix_str(f"measuring this machine; {self.label}", refresh=False)
        self.tqdm.refresh()

    def write(self, line: str) -> None:
        """Print ``line`` above the bar (the bar is drawn again below it)."""
        self.tqdm.write(line, file=self.tqdm.fp)

    def close(self) -> None:
        self.tqdm.n = 1000
        self.tqdm.set_postfix_str(self.label, refresh=False)
        self.tqdm.close()


def overlap_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in rows:
        o = r.get("overlap")
        if o:
            lines.append(
                f"{r['config']}: {o['gain_x']:.2f}x {o['reference']}, where perfect overlap gives {o['bound_x']:.2f}x "
                f"(env {o['env_ms_per_env_step']:.1f} + policy {o['policy_ms_per_env_step']:.1f} ms per env step, "
                f"over the larger); this row's policy: {r['breakdown_ms_per_env_step'].get('policy', 0.0):.1f} ms per env step"
            )
    return lines


def ablation_table(rows: list[dict[str, Any]]) -> str:
    headers = ["configuration", "env-steps/s", "spread", "x Default", "ms/env step", "x floor", "same data", *CATEGORIES]
    cells = []
    for r in rows:
        b = r["breakdown_ms_per_env_step"]
        parts = [f"{b[c]:.1f}" if c in b else "-" for c in CATEGORIES]
        if "env (stock, not broken down)" in b:
            parts[0] = f"({b['env (stock, not broken down)']:.1f} env)"
        same = r["same_data_as_default"]
        same_cell = "reference" if r is rows[0] else (f"yes ({same['chunks_compared']} chunks)" if same["equal"] else f"NO: {same['first_difference']}")
        name = r["config"]
        missing = r.get("own_fast_paths_not_served")
        if missing:  # never labelled as if its own path had served
            name += f" [NOT SERVED: {', '.join(missing)}]"
        cells.append(
            [name, f"{r['env_steps_per_s']:.1f}", f"{r['spread_env_steps_per_s']:.1f}", f"{r['speedup_vs_default']:.2f}",
             f"{r['ms_per_env_step']:.1f}", f"{r['x_floor']:.2f}" if r["x_floor"] else "-", same_cell, *parts]
        )
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths)) for c in cells]
    lines.append(
        "(breakdown: ms per env step; physics = sub-steps without observation, step = the last sub-step of a "
        "chunk with its observation, observe = observations on their own; env-process time summed over processes; "
        "same data: each env's rewards, dones and kept observations, chunk by chunk, equal Default's; "
        "NOT SERVED: the configuration's own fast path stepped aside in some env, the JSON's fast_paths_served says where)"
    )
    lines += overlap_lines(rows)
    lines.append(renderer_line(rows))
    return "\n".join(lines)


def plot(payload: dict[str, Any], path: str | Path) -> Path:
    """Draw a run's chart from its payload (``run``'s, or its JSON read back) into ``path``.

    Example:
        >>> plot(json.loads(Path("results/fastenv_bench_2core_avx512.json").read_text()), "bench.png")
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = _figure(payload)
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _figure(payload: dict[str, Any]) -> Any:
    """``plot``'s figure: throughput with its ratio to Default, and where each configuration's time goes."""
    import matplotlib.pyplot as plt

    rows, cfg = payload["results"], payload["config"]
    names = [r["config"] for r in rows]
    # constrained layout keeps the titles, tick labels and the legend below inside the figure
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), layout="constrained")
    values = [r["env_steps_per_s"] for r in rows]
    errors = [r["spread_env_steps_per_s"] / 2 for r in rows]
    bars = left.bar(range(len(rows)), values, yerr=errors, color=["#9e9e9e"] + ["#1f77b4"] * (len(rows) - 1))
    for bar, row, error in zip(bars, rows, errors):
        left.annotate(f"{row['speedup_vs_default']:.1f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height() + error),
                      xytext=(0, 2), textcoords="offset points", ha="center", va="bottom")
    left.margins(y=0.12)  # room above the tallest bar for its label
    left.set_xticks(range(len(rows)), names, rotation=25, ha="right")
    left.set_ylabel("env-steps/s (higher is better)")
    left.set_title(f"LIBERO {cfg['suite']} task {cfg['task_id']}, {cfg['num_envs']} envs, {cfg['camera_size']}px")
    colors = {"physics": "#1f77b4", "step": "#17becf", "observe": "#ff7f0e", "reset": "#2ca02c", "transport_wait": "#9467bd",
              "policy": "#d62728", "env (stock, not broken down)": "#9e9e9e"}
    totals = np.array([sum(r["breakdown_ms_per_env_step"].values()) or 1.0 for r in rows])
    left_edge = np.zeros(len(rows))
    for key, color in colors.items():
        share = np.array([r["breakdown_ms_per_env_step"].get(key, 0.0) for r in rows]) / totals
        if share.any():
            right.barh(range(len(rows)), share, left=left_edge, color=color, label=key)
            left_edge += share
    right.set_yticks(range(len(rows)), names)
    right.invert_yaxis()
    right.set_xlim(0.0, 1.0)
    right.set_xlabel("share of the time accounted for")
    right.set_title("where the time goes\n(env processes summed; policy in this process)")
    # below the axes, off the bars
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, fontsize=8, frameon=False)
    return fig



def server_table(payload: dict[str, Any]) -> str:
    headers = ["N", "row", "layout", "env-steps/s", "x Default", "x bound", "x closed loop", "busy", "batch", "P loop/alone",
               "GPU loop/alone", "around ms/call", "GPU MB", "host MB", "same data"]
    cells = []
    for entry in payload["rows"]:
        for name in ("Default", "fastenv"):
            r = entry.get(name)
            if r is None:
                continue
            if "error" in r:
                cells.append([str(entry["num_envs"]), name, "failed", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", r["error"][:60]])
                continue
            if "not_run" in r:
                model = r["model_estimate_env_steps_per_s"]
                cells.append([str(entry["num_envs"]), name, "not run", f"(model {model:.0f})" if model else "-", "-", "-", "-",
                              "-", "-", "-", "-", "-", "-", "-", r["not_run"]])
                continue
            p = r["policy"]
            gpu = r.get("gpu_memory_mb") or {}
            gpu_cell = f"{gpu.get('device_used_mb'):.0f}" if gpu.get("device_used_mb") is not None else "-"
            same = r.get("same_data_as_default")
            same_cell = "reference" if name == "Default" else ("-" if same is None else
                                                             f"yes ({same['chunks_compared']} chunks)" if same["equal"] else f"NO: {same['first_difference']}")
            ratio = p["in_loop_over_alone"]
            device = p.get("device_ms_per_call") / p["device_ms_per_call_alone"] if p.get("device_ms_per_call_alone") else None
            cells.append([str(entry["num_envs"]), name, r["layout"]["label"], f"{r['env_steps_per_s']:.1f}",
                          f"{r['x_default']:.2f}" if "x_default" in r else ("1.00" if name == "Default" else "-"),
                          f"{r['x_bound']:.2f}" + (" FAULT" if r.get("calibration_fault") else ""), f"{r['x_closed_loop']:.2f}",
                          f"{p['busy_share']:.0%}", f"{p['mean_batch']:.1f}",
                          f"{ratio:.2f}" if ratio else "-", f"{device:.2f}" if device else "-", f"{r['around_policy_ms_per_call']:.1f}", gpu_cell,
                          f"{r['host_memory_mb']['envs'] + r['host_memory_mb']['policy_process']:.0f}", same_cell])
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths)) for c in cells]
    for entry in payload["rows"]:
        bd = entry["bound"]
        i = bd["inputs"]
        spread = f" from {bd['c_from']} (spread {bd['c_spread']:.0%})" if "c_spread" in bd else ""
        lines.append(f"N={entry['num_envs']}: bound = min(N K / P(N), C / c) = min({bd['policy_term']:.0f}, {bd['env_term']:.0f}) = "
                     f"{bd['bound']:.0f} env-steps/s ({bd['limit']}); a = {1000 * i['a_s']:.1f} ms, b = {1000 * i['b_s']:.2f} ms, "
                     f"c = {1000 * i['c_s']:.2f} ms{spread}, C = {i['C']}, K = {i['K']}; the closed loop's best: {bd['closed_loop']:.0f} "
                     f"({bd['closed_loop_stages']} group(s), {bd['closed_loop_share_of_bound']:.0%} of the bound)")
        for name in ("Default", "fastenv"):
            fault = (entry.get(name) or {}).get("calibration_fault")
            if fault:
                lines.append(f"N={entry['num_envs']} {name}: FAULT, not a result: {fault}")
    lines.append("(x bound: of min(N K / P(N), C / c), FAULT where a row is above it by more than its calibration's spread; "
                 "x closed loop: of the best a layout can do when each env waits for its own actions; busy: the policy's share of the wall time; P loop/alone: its seconds per call in the loop over alone at the "
                 "same batch; GPU loop/alone: the same for the device's time from the call's first kernel to its last (CUDA events: "
                 "other processes' GPU work, renders, stalls it); around: wall time per call outside the policy's calls)")
    return "\n".join(lines)

