#!/usr/bin/env bash
# Installs an already built attnkit into a temporary prefix, moves that prefix (the install must be
# relocatable), then builds and runs consumer.cpp against it twice: with CMake find_package
# (CMakeLists.txt here) and with pkg-config. Also fails if an installed CMake or pkg-config file
# names the build tree, the source tree or a dependency's absolute path.
# Usage: run_test.sh BUILD_DIR [CXX_COMPILER]   (does not rebuild the library)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
cxx="${2:-c++}"
source_dir="$(cd "$here/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/first" >/dev/null
mv "$tmp/first" "$tmp/moved"
prefix="$tmp/moved"

config="$(find "$prefix" -name attnkitConfig.cmake)"
pc="$(find "$prefix" -name attnkit.pc)"
[ -n "$config" ] && [ -n "$pc" ] || { echo "run_test.sh: attnkitConfig.cmake or attnkit.pc not installed" >&2; exit 1; }
for bad in "$build" "$source_dir" "$tmp/first" /libopenblas /libstb /libdnnl; do
  if grep -rl -- "$bad" "$(dirname "$config")" "$pc"; then
    echo "run_test.sh: installed package files name '$bad' (not relocatable)" >&2
    exit 1
  fi
done

cmake -S "$here" -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/consumer"

# shellcheck disable=SC2046  # pkg-config's output is a list of flags
"$cxx" -std=c++20 -O1 "$here/consumer.cpp" -o "$tmp/consumer_pc" \
  $(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs attnkit)
"$tmp/consumer_pc"
