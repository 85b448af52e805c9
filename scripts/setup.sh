#!/usr/bin/env bash
# Set up fastenv on a fresh Debian/Ubuntu machine: the EGL libraries MuJoCo renders with, a virtual
# environment in .venv, and fastenv with the extras named in $1 (default: what the tests use).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-libero,test,sb3,bench,ray}"
apt_packages="libegl1 libegl-mesa0 libgl1 libosmesa6"

if ! dpkg -s $apt_packages >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing EGL libraries: $apt_packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $apt_packages >/dev/null
  else
    echo "MuJoCo needs EGL libraries that are not installed. Run, as root:" >&2
    echo "  sudo apt-get install -y $apt_packages" >&2
    exit 1
  fi
fi

python="${PYTHON:-python3}"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
  echo "fastenv needs Python >= 3.10; $python is $("$python" --version 2>&1)" >&2
  exit 1
}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
case ",$extras," in
  # torch pinned; PyTorch's CPU index (PIP_EXTRA_INDEX_URL) gives the CPU wheel instead of CUDA packages.
  *,torch,*|*,bench,*|*,sb3,*|*,cleanrl,*|*,torchrl,*|*,tianshou,*|*,skrl,*|*,sbx,*|*,rl-games,*|*,pufferlib,*|*,maniskill,*|*,test,*) .venv/bin/python -m pip install -q "torch==2.13.0" ;;
esac
.venv/bin/python -m pip install -q -e ".[$extras]"
case ",$extras," in
  # The tests talk to openpi's policy server through openpi-client, whose numpy<2 pin is its own (the
  # client and its image tools run on numpy 2): installed without its pins (its websocket client needs
  # only websockets, msgpack and pillow, which the test extra installs).
  *,test,*) .venv/bin/python -m pip install -q --no-deps "openpi-client==0.1.2" ;;
esac
case ",$extras," in
  # rl_games pins psutil<6, which it never imports (fastenv's bench extra and Ray run psutil 7): installed
  # without its pins; its dependencies come with the rl-games extra (the test extra lists them too).
  *,rl-games,*|*,test,*) .venv/bin/python -m pip install -q --no-deps "rl_games==1.6.5" ;;
esac
case ",$extras," in
  # pufferlib-core pins torch==2.9.0 for its compiled trainer extension (pufferlib._C), which fastenv does not
  # use; its vectorization and emulation are pure Python on fastenv's torch: installed without its pins, its
  # dependencies come with the pufferlib extra (the test extra lists them too).
  *,pufferlib,*|*,test,*) .venv/bin/python -m pip install -q --no-deps "pufferlib-core==3.0.23" ;;
esac
case ",$extras," in
  # ManiSkill (SAPIEN) renders with Vulkan, even for state-only tasks.
  *,maniskill,*|*,test,*) bash scripts/vulkan.sh .venv/bin/python ;;
esac
case ",$extras," in
  # numba's cache then holds LIBERO's control loop (else the first run compiles it in the background)
  *,libero,*|*,libero-existing,*) .venv/bin/fastenv compile || echo "fastenv compile failed: the first run compiles it" >&2 ;;
esac
echo "fastenv installed in .venv with extras [$extras]"
