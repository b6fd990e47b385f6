#!/usr/bin/env bash
# The installed C++ package, used the way a stranger would: `cmake --install` into a temporary prefix, then
# examples/cpp configured and built OUT OF TREE against that prefix only, and run (it exits 1 if its loss did
# not fall). Also checks that nothing installed points back into the source or build tree.
# Usage: package_test.sh SOURCE_DIR BUILD_DIR [PYTHON]; with PYTHON, the installed Python package is imported too.
# Cost: ~45 s on an idle 2-core machine (compiling the example), over 10 min when it is loaded.
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/shadowgrad/shadowgrad.h include/shadowgrad/accumulate/ShadowAccumulator.h \
         lib*/cmake/shadowgrad/shadowgradConfig.cmake lib*/libshadowgrad_engine.a \
         lib/python3*/site-packages/shadowgrad/__init__.py lib/python3*/site-packages/shadowgrad/_build_info.py; do
  compgen -G "$prefix/$f" >/dev/null || { echo "FAIL: not installed: $f"; exit 1; }
done
# One line may: the torch the package was built against, a fallback used only while it exists (here the venv lies
# inside the source tree; cmake/shadowgradConfig.cmake.in).
if grep -rnI -e "$src" -e "$build" "$prefix/include" "$prefix"/lib*/cmake | grep -v 'set(shadowgrad_built_torch_prefix '; then
  echo "FAIL: installed files above refer to the source or build tree"; exit 1
fi
# The engine's headers, and util/Hash.h, which its StochasticRounding.h includes; never a trainer internal.
if ls "$prefix/include/shadowgrad" | grep -qvx -e shadowgrad.h -e accumulate -e util ||
   ls "$prefix/include/shadowgrad/util" | grep -qvx -e Hash.h; then
  echo "FAIL: more than the engine's public headers installed:"; ls -R "$prefix/include/shadowgrad"; exit 1
fi

if [ $# -ge 3 ]; then
  PYTHONPATH=$(compgen -G "$prefix/lib/python3*/site-packages") "$3" -c \
    'import shadowgrad, torch; assert shadowgrad.__file__.startswith("'"$prefix"'"), shadowgrad.__file__'
fi

# The promise: the example's GA part is at most 15 lines.
ga_lines=$(sed -n '/---- gradient accumulation/,/---- end of the GA part/p' "$src/examples/cpp/foreign_model.cpp" |
           grep -cv -e '^\s*$' -e '^\s*//')
[ "$ga_lines" -le 15 ] || { echo "FAIL: the example's GA part has $ga_lines lines (> 15)"; exit 1; }

# A copy of the example outside both trees, so no relative path can reach the sources.
cp -r "$src/examples/cpp" "$work/example"
# As the README says: the installed prefix alone. The package finds the torch it was built against by itself.
cmake -S "$work/example" -B "$work/example/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/example/build" -j 2 >/dev/null
"$work/example/build/foreign_model" 30 4
