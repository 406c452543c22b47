#!/usr/bin/env bash
# python_env.sh - the Python package's environment: a virtual environment kept outside the clone
# (FLASHATTN_VENV, default ${XDG_CACHE_HOME:-$HOME/.cache}/flashattn/venv) and reused when
# present, with numpy, pytest, scikit-build-core and PyTorch from PyPI, then the package built
# from this tree into it (`pip install .`). Prints the venv's python as its last line.
#
# What it downloads the first time (PyPI): numpy, pytest, scikit-build-core, and torch with its
# dependencies: on Linux x86_64 PyPI's torch wheel (about 540 MB) brings the CUDA 13 runtime
# wheels it is linked with (nvidia-*, cuda-toolkit, triton: about 4.5 GB installed in all).
# FLASHATTN_PYTHON_TORCH=0 leaves torch out (the numpy tests run; the torch tests skip).
set -eu
cd "$(dirname "$0")/.."
venv=${FLASHATTN_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/flashattn/venv}

if ! python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "python_env: installing python3 and python3-venv" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        python3 python3-venv >/dev/null
fi
if [ ! -x "$venv/bin/python" ]; then
    echo "python_env: creating $venv" >&2
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
fi
py=$venv/bin/python
pip=("$py" -m pip install -q --disable-pip-version-check)
"$py" -c "import numpy, pytest, scikit_build_core" 2>/dev/null ||
    "${pip[@]}" numpy pytest scikit-build-core >&2
if [ "${FLASHATTN_PYTHON_TORCH:-1}" = 1 ] && ! "$py" -c "import torch" 2>/dev/null; then
    echo "python_env: installing torch from PyPI (several GB the first time)" >&2
    "${pip[@]}" torch >&2
fi
# The package from this tree, its library built by CMake under build/python/ (kept between runs).
"${pip[@]}" --no-build-isolation --force-reinstall --no-deps . >&2
echo "$py"
