#!/usr/bin/env bash
# Intent: `pip install --no-build-isolation .` as a user runs it (docs/python.md): into a fresh venv that already
# has torch, then the Python tests through the installed package only (no PYTHONPATH, run from outside the tree).
# The fresh venv sees the project venv's torch and torchvision through a .pth file rather than a 5.5 GB second copy.
# With SHADOWGRAD_PREBUILT_DIR set to a CMake build folder (ctest sets its own), pip packages the module that build
# compiled instead of compiling the same sources again (setup.py); a control then points it at a build whose list of
# sources differs from setup.py's, which must be refused. Without it, pip compiles the module as a user's does.
# Usage: [SHADOWGRAD_PREBUILT_DIR=BUILD_DIR] tests/pip_install_test.sh SOURCE_DIR WORK_DIR PYTHON_WITH_TORCH
# Cost: 32 s (34 s of CPU) alone on a quiet 2-core machine with SHADOWGRAD_PREBUILT_DIR, 134 s in a fresh clone's
# ctest at -j4 (2026-12-06); compiling the module instead adds about 220 s of CPU (docs/setup.md).
set -euo pipefail
src=$1 work=$2 torch_python=$3
rm -rf "$work" && mkdir -p "$work"
# Without a pip of its own (ensurepip costs 3.5 s of CPU): the torch venv's pip installs into it (pip --python).
python3 -m venv --without-pip "$work/venv"
py=$work/venv/bin/python
pip=("$torch_python" -m pip --python "$py")
own_site=$("$py" -c 'import site; print(site.getsitepackages()[0])')
"$torch_python" -c 'import site; print(site.getsitepackages()[0])' > "$own_site/torch_env.pth"
"$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' ||
  { echo "FAIL: torch not visible in the fresh venv"; exit 1; }
# --no-build-isolation builds with this environment's own tools: a venv's setuptools may predate pyproject.toml's
# requirement (bdist_wheel in setuptools itself), as a user's may.
"${pip[@]}" install -q --disable-pip-version-check --no-compile --upgrade 'setuptools>=70.1' 2> >(grep -v '^WARNING: Location' >&2)
# A copy of the sources, as a user's checkout, so the build leaves nothing in the tree.
mkdir -p "$work/checkout" && (cd "$src" && git ls-files --cached --others --exclude-standard -z | xargs -0 cp --parents -t "$work/checkout")
"${pip[@]}" install -q --disable-pip-version-check --no-build-isolation --no-deps "$work/checkout" 2> >(grep -v '^WARNING: Location' >&2)
cd "$work"
# The installed package, in one interpreter (each start imports torch: 2 s of CPU): imported from site-packages, with
# one OpenMP runtime in the process, torch's own libgomp. Prints the module's path last.
so=$("$py" -c 'import sys, shadowgrad, shadowgrad._C as c
assert "/site-packages/" in shadowgrad.__file__, shadowgrad.__file__
print("installed:", shadowgrad.__file__, shadowgrad.__version__, file=sys.stderr)
maps = {l.split()[-1] for l in open("/proc/self/maps") if "libgomp" in l}
assert len(maps) == 1 and "/torch/lib/" in next(iter(maps)), maps
print("OpenMP runtime:", *maps, file=sys.stderr)
print(c.__file__)') || { echo "FAIL: the installed package"; exit 1; }
# A module a compiler made for this package has no RUNPATH; a build tree's (into the build's venv) must not ride along.
if readelf -d "$so" | grep -E 'RPATH|RUNPATH'; then echo "FAIL: the installed $so keeps a search path"; exit 1; fi
if [ -n "${SHADOWGRAD_PREBUILT_DIR:-}" ]; then
  # Control: a build that compiled one more source than setup.py knows of is refused, naming it.
  mkdir -p "$work/other-build/python"
  { cat "$SHADOWGRAD_PREBUILT_DIR/python/prebuilt_module.txt"; echo source=src/accumulate/Extra.cpp; } \
    > "$work/other-build/python/prebuilt_module.txt"
  if SHADOWGRAD_PREBUILT_DIR="$work/other-build" "${pip[@]}" install --disable-pip-version-check --no-build-isolation \
       --no-deps --force-reinstall "$work/checkout" > "$work/control.log" 2>&1; then
    echo "FAIL: control: a build with a source setup.py does not compile was packaged"; exit 1
  fi
  grep -q "only in CMake: \['src/accumulate/Extra.cpp'\]" "$work/control.log" ||
    { cat "$work/control.log"; echo "FAIL: control: the refusal does not name the extra source"; exit 1; }
  echo "control: a build from another list of sources refused"
fi
env -u PYTHONPATH "$py" -m unittest discover -s "$src/python/tests" -t "$src/python/tests"
