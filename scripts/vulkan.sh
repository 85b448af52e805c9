#!/usr/bin/env bash
# A Vulkan device for SAPIEN (ManiSkill3) on a machine without one: Mesa's CPU driver (lavapipe).
#
# SAPIEN needs Vulkan even for state-only tasks, and Debian 12's own lavapipe (Mesa 22.3) lacks the
# descriptor-indexing features it requires; bookworm-backports' Mesa 25 has them. The backports
# package is downloaded and unpacked into the virtual environment (.venv/share/fastenv/vulkan),
# with an ICD file that fastenv's ManiSkill backend points Vulkan's loader at. No system package is
# replaced: LIBERO keeps rendering with the system's OpenGL/EGL. A machine whose Vulkan already
# works (a real GPU) is left alone.
#
#   bash scripts/vulkan.sh [python]      # python: the venv's interpreter (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"
prefix="$("$python" -c 'import sys; print(sys.prefix)')"
target="$prefix/share/fastenv/vulkan"
icd="$target/lvp_icd.json"

probe() {  # exit 0 when SAPIEN finds a rendering device (with the driver fastenv would point it at)
  "$python" - <<'PY' >/dev/null 2>&1
from fastenv.backends.maniskill import configure_vulkan
configure_vulkan()
import sapien
sapien.render.RenderMaterial()
PY
}

if probe; then
  echo "Vulkan: a rendering device is available"
  exit 0
fi
if [ ! -r /etc/os-release ] || ! grep -q '^VERSION_CODENAME=bookworm' /etc/os-release; then
  echo "Vulkan: no rendering device, and this is not Debian 12 (bookworm): install a Vulkan driver" \
       "with descriptor indexing (Mesa >= 24 lavapipe, or a GPU's driver) for ManiSkill" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "Vulkan: no rendering device; run as root to install Mesa's CPU driver for ManiSkill" >&2
  exit 1
fi

# The driver's runtime libraries, all from bookworm itself (the loader, libvulkan1, silences SAPIEN's warning).
deps="libvulkan1 libllvm15 libdrm2 libdrm-amdgpu1 libelf1 libexpat1 libwayland-client0 libx11-xcb1 libxcb-dri3-0 libxcb-present0 libxcb-randr0 libxcb-shm0 libxcb-sync1 libxcb-xfixes0 libxshmfence1 libzstd1 zlib1g"
if ! dpkg -s $deps >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $deps >/dev/null
fi

# mesa-vulkan-drivers from bookworm-backports, through a private sources list (nothing else changes).
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
uri="${uri:-http://deb.debian.org/debian}"
mkdir -p "$work/lists/partial"
echo "deb $uri bookworm-backports main" > "$work/sources.list"
apt_opts=(-o APT::Sandbox::User=root -o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=/nonexistent -o "Dir::State::Lists=$work/lists")
apt-get -qq "${apt_opts[@]}" update
(cd "$work" && apt-get -qq "${apt_opts[@]}" download mesa-vulkan-drivers/bookworm-backports 2>/dev/null)
rm -rf "$target"
mkdir -p "$target"
dpkg -x "$work"/mesa-vulkan-drivers_*.deb "$target/root"
lib="$target/root/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"
[ -f "$lib" ] || { echo "Vulkan: the backports package has no $lib" >&2; exit 1; }
api="$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["ICD"]["api_version"])' "$target/root/usr/share/vulkan/icd.d/lvp_icd.json")"
printf '{"file_format_version": "1.0.0", "ICD": {"api_version": "%s", "library_path": "%s"}}\n' "$api" "$lib" > "$icd"

if probe; then
  echo "Vulkan: Mesa's CPU driver (lavapipe) installed in $target"
else
  echo "Vulkan: lavapipe installed in $target, but SAPIEN still finds no rendering device" >&2
  exit 1
fi
