"""The documented patches of ManiSkill's PPO scripts are unified diffs that `git apply` and `patch`
take as they are (docs/backends/maniskill.md).

Without ManiSkill: each diff applies to a file made of its own context and removed lines. With
MANISKILL_PPO_SCRIPT / MANISKILL_PPO_RGB_SCRIPT (ManiSkill's scripts, not redistributed here):
`git apply` and `patch -p1` on a copy of the script give what the tests run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from maniskill_patches import DOCS, parse_unified_diff, patch_block, patched_ppo, pre_image

BLOCKS = [(DOCS, "ppo.py"), (DOCS, "ppo_rgb.py")]
SCRIPTS = {"ppo.py": os.environ.get("MANISKILL_PPO_SCRIPT"), "ppo_rgb.py": os.environ.get("MANISKILL_PPO_RGB_SCRIPT")}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


def apply(how: str, tree: Path, diff: Path, check: bool = False) -> subprocess.CompletedProcess:
    """`git apply` or `patch -p1` (no fuzz) of ``diff`` in ``tree``; asserts it succeeded."""
    if how == "git":
        args = [tool("git"), "apply", "--verbose", *(["--check"] if check else []), str(diff)]
    else:
        args = [tool("patch"), "-p1", "--fuzz=0", "--batch", "--forward", *(["--dry-run"] if check else []), "-i", str(diff)]
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}  # `git apply` outside any repository
    done = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{' '.join(args[:3])}: {done.stdout}{done.stderr}"
    return done


def checkout(tmp_path: Path, script: str, source: str) -> tuple[Path, Path]:
    """A tree with ``source`` at the path the diff names: (tree, the file)."""
    tree = tmp_path / "ManiSkill"
    target = tree / "examples" / "baselines" / "ppo" / script
    target.parent.mkdir(parents=True)
    target.write_text(source)
    return tree, target


@pytest.mark.parametrize(("doc", "script"), BLOCKS, ids=["docs-ppo.py", "docs-ppo_rgb.py"])
def test_the_documented_patches_are_unified_diffs_that_git_apply_and_patch_take(tmp_path, doc, script):
    block = patch_block(doc, script)
    old_file, new_file, hunks = parse_unified_diff(block)  # file headers, @@ -l,n +l,n @@ with counts that add up
    assert (old_file, new_file) == (f"a/examples/baselines/ppo/{script}", f"b/examples/baselines/ppo/{script}")
    assert all(h.lines[0][0] == " " and h.lines[-1][0] == " " for h in hunks)  # context on both sides of each change
    source = pre_image(block)
    tree, target = checkout(tmp_path, script, source)
    diff = tmp_path / "fastenv.diff"
    diff.write_text(block)
    apply("git", tree, diff, check=True)
    apply("patch", tree, diff, check=True)
    assert target.read_text() == source  # dry runs
    done = apply("patch", tree, diff)
    assert "offset" not in done.stdout and "fuzz" not in done.stdout  # at the lines the headers say
    assert target.read_text() == patched_ppo(source, doc, script)
    target.write_text(source)
    apply("git", tree, diff)
    assert target.read_text() == patched_ppo(source, doc, script)


@pytest.mark.parametrize(("doc", "script"), BLOCKS, ids=["docs-ppo.py", "docs-ppo_rgb.py"])
def test_the_documented_patches_apply_to_maniskills_scripts(tmp_path, doc, script):
    if SCRIPTS[script] is None:
        pytest.skip(f"set {'MANISKILL_PPO_SCRIPT' if script == 'ppo.py' else 'MANISKILL_PPO_RGB_SCRIPT'} to ManiSkill's "
                    f"examples/baselines/ppo/{script} (not redistributed)")
    source = Path(SCRIPTS[script]).read_text()
    expected = patched_ppo(source, doc, script)  # what the tests that run the script run
    assert expected != source
    diff = tmp_path / "fastenv.diff"
    diff.write_text(patch_block(doc, script))
    for how in ("git", "patch"):
        tree, target = checkout(tmp_path / how, script, source)
        done = apply(how, tree, diff)
        assert "fuzz" not in done.stdout
        assert target.read_text() == expected, how


# -- benchmarks/maniskill_ppo_cpu_flags.py: the patched script's evaluations, per run of flags ---------
def flags_benchmark():
    sys.path.insert(0, str(DOCS.parents[2] / "benchmarks"))
    import maniskill_ppo_cpu_flags

    return maniskill_ppo_cpu_flags


def test_the_flags_benchmark_patches_ppo_py_with_the_readmes_diff_and_reads_its_evaluations(tmp_path):
    bench = flags_benchmark()
    assert bench.readme_diff() == patch_block(DOCS)
    source = tmp_path / "ppo.py"
    source.write_text(pre_image(patch_block(DOCS)))
    script = bench.patched_script(source, tmp_path / "work")
    assert script.read_text() == patched_ppo(source.read_text())
    stdout = "\n".join([  # ppo.py's lines: an evaluation at the start of iterations 1 and 11
        "Running training", "Epoch: 1, global_step=0", "Evaluating", "Evaluated 400 steps resulting in 8 episodes",
        "eval_success_once_mean=0.0", "eval_return_mean=3.5", "eval_success_at_end_mean=0.0", "SPS: 80",
        "Epoch: 2, global_step=800", "SPS: 81", "Epoch: 11, global_step=8000", "Evaluating",
        "Evaluated 400 steps resulting in 8 episodes", "eval_success_once_mean=1.0", "eval_return_mean=30.25",
        "eval_success_at_end_mean=0.875", "SPS: 82",
    ])
    evals = bench.parse_evals(stdout)
    assert evals == [{"step": 0, "success_once": 0.0, "return": 3.5, "success_at_end": 0.0},
                     {"step": 8000, "success_once": 1.0, "return": 30.25, "success_at_end": 0.875}]
    assert bench.first_step_at(evals, "success_once", 1.0) == 8000 and bench.first_step_at(evals, "success_at_end", 1.0) is None
    source.write_text("print('not ppo.py')\n")
    with pytest.raises(SystemExit, match="does not apply"):
        bench.patched_script(source, tmp_path / "other")


@pytest.mark.maniskill
def test_the_flags_benchmark_runs_maniskills_ppo_py(tmp_path):
    if SCRIPTS["ppo.py"] is None:
        pytest.skip("set MANISKILL_PPO_SCRIPT to ManiSkill's examples/baselines/ppo/ppo.py (not redistributed)")
    out = tmp_path / "flags.json"
    payload = flags_benchmark().main(["--script", SCRIPTS["ppo.py"], "--out", str(out), "--flags",
                                      "--num-envs 4 --num-eval-envs 2 --num-steps 8 --total-timesteps 96 --num-minibatches 2 "
                                      "--update-epochs 1 --eval-freq 2 --num-eval-steps 50"])
    (row,) = payload["runs"]
    assert row["returncode"] == 0, row.get("stderr_tail")
    assert row["iterations"] == 3 and [e["step"] for e in row["evals"]] == [0, 64]  # at the start of iterations 1 and 3
    assert all(0.0 <= e["success_once"] <= 1.0 and "success_at_end" in e and "return" in e for e in row["evals"])
    assert payload["mani_skill"] and out.exists()
