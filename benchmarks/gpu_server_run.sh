#!/usr/bin/env bash
# One prepared run on a GPU machine that has PyTorch and CUDA but no network and no LIBERO:
# the policy-server regime (fastenv bench --regime server) and fastenv eval with a VLA-sized
# transformer, each part under a time limit, the JSON written after each part.
#
#   python benchmarks/pack_libero.py --tasks libero_spatial:all libero_goal:3,7 --out .carry/libero_spatial_goal.tar.xz
#   (and, for that machine's Python, the mujoco wheel in .whl/ and the EGL loader packages in .gl/)
#   OUT=/some/folder bash benchmarks/gpu_server_run.sh [smoke]
#
# "smoke" runs a few seconds of each part (checks the machine before a long run). Results go to
# $OUT (default results/gpu_run): bench_gpu_server.json, and the log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-results/gpu_run}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_server_run.log") 2>&1
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# EGL and Vulkan loaders (libglvnd), where the machine lacks them
if [ -d .gl ] && ! ldconfig -p | grep -q libEGL.so.1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -f "$vendor" ] && export __EGL_VENDOR_LIBRARY_FILENAMES="$vendor"

site=/tmp/fastenv-site
mkdir -p "$site"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl || exit 1
fi
for archive in .carry/*.tar.xz; do
  [ -f "$archive" ] && { tar -xJf "$archive" -C "$site" || exit 1; }
done
export PYTHONPATH="$site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONUNBUFFERED=1
python3 -c "import fastenv, mujoco, robosuite, libero, torch; print('fastenv', fastenv.__version__, 'mujoco', mujoco.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))" || exit 1

if [ "${1:-}" = smoke ]; then
  python3 benchmarks/bench_gpu_server.py --parts server eval --envs 4 --server-seconds 2 --server-limit 240 \
    --out "$OUT/bench_gpu_server_smoke.json" --eval-limit 180 --eval-args --tasks 0 --episodes 1 --no-progress
  exit $?
fi
# PARTS, SERVER_ARGS (e.g. "--envs 64 128 16 --default-envs 16"), EVAL_ARGS choose what runs.
python3 benchmarks/bench_gpu_server.py --parts ${PARTS:-server eval} --server-seconds "${SERVER_SECONDS:-10}" --server-limit "${SERVER_LIMIT:-420}" \
  ${SERVER_ARGS:-} --out "$OUT/bench_gpu_server.json" --eval-limit "${EVAL_LIMIT:-200}" \
  --eval-args ${EVAL_ARGS:---workers 15 --envs-per-worker 4 --seconds 100 --no-progress}
