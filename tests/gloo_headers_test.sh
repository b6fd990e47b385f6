#!/usr/bin/env bash
# Intent: the Gloo design stays sound (docs/distributed.md, "Gloo"). c10d's ProcessGroupGloo is torch's, with the
# gloo torch bundles; Debian's libgloo-dev gives only the headers ProcessGroupGloo.hpp includes. That is safe while
# (1) no object of ours defines gloo code from those headers (it would be Debian's gloo, not torch's), and
# (2) no binary links Debian's libgloo (two gloos in one process, whose exported symbols would interpose).
# Usage: tests/gloo_headers_test.sh BUILD_DIR TRAINER      Cost: a second.
set -euo pipefail
build=$1 trainer=$2
object=$(find "$build/CMakeFiles/shadowgrad.dir" -name 'Communicator.cpp.o' | head -1)
[[ -n $object ]] || { echo "FAIL: no Communicator.cpp.o under $build"; exit 1; }
# Defined symbols in namespace gloo, other than read-only constants local to the object (nm type 'r').
defined=$(nm -C --defined-only "$object" | awk '$2 != "r" && $0 ~ / gloo::/' || true)
if [[ -n $defined ]]; then
  echo "FAIL: $object defines gloo code from Debian's headers:"; echo "$defined"; exit 1
fi
# Every gloo symbol it uses is torch's (undefined here, resolved in libtorch_cpu.so).
used=$(nm -C --undefined-only "$object" | grep -c 'gloo::' || true)
echo "Communicator.cpp.o: no gloo definitions; $used references to gloo symbols, left to torch's"
if ldd "$trainer" | grep -q 'libgloo'; then
  echo "FAIL: $trainer links a libgloo:"; ldd "$trainer" | grep libgloo; exit 1
fi
lib=$(ldd "$trainer" | awk '/libtorch_cpu.so/ {print $3}')
missing=0
while read -r sym; do
  nm -D --defined-only "$lib" | grep -qF " $sym" || { echo "FAIL: $sym is not exported by $lib"; missing=1; }
done < <(nm --undefined-only "$object" | awk '{print $2}' | grep -E '4gloo|N4gloo' || true)
((missing == 0)) || exit 1
echo "PASS: one gloo in the process, torch's ($lib)"
