#!/usr/bin/env bash
# Gathers what the GPU machine needs to run this machine's CMake CUDA build into one folder:
# `tensorfold`, the gpu_test_* programs, bench_cuda_linear and probe_mma_bits (stripped) and every shared library
# they link that a base Ubuntu 24.04 + CUDA image may lack (utf8proc, pcre2, ...).
# The CUDA runtime is linked statically and the driver (libcuda) is the machine's own, so neither is
# bundled; nor is cuBLAS (bench_cuda_linear only, 600 MB): gpu_run.sh takes the machine's CUDA one.
# Usage: tools/gpu_bundle.sh [BUILD_DIR]    (default build-cuda; writes BUILD_DIR/bundle and, to carry,
# BUILD_DIR/bundle.tar.xz). Then on the GPU machine, carrying BUILD_DIR/bundle.tar.xz:
#   tar -xJf BUILD_DIR/bundle.tar.xz -C BUILD_DIR && OUT=dir tools/gpu_run.sh BUILD_DIR/bundle
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-cuda}
BUNDLE=$BUILD/bundle
MAX_MIB=48

binaries=("$BUILD/tensorfold" "$BUILD"/gpu_test_* "$BUILD/bench_cuda_linear" "$BUILD/probe_mma_bits")
for binary in "${binaries[@]}"; do
  [ -x "$binary" ] || { echo "missing $binary: build first (cmake --build $BUILD)"; exit 1; }
done
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/lib"
for binary in "${binaries[@]}"; do strip -o "$BUNDLE/$(basename "$binary")" "$binary"; done

# glibc's own libraries, libstdc++ and libgcc_s are in every Ubuntu 24.04 image, newer than ours
# (they are backward compatible; a bundled older copy could be loaded against a newer glibc).
system_libraries='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s)\.so'
for binary in "${binaries[@]}"; do ldd "$binary"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $system_libraries ]] && continue
    [[ $name == libcuda.so* ]] && { echo "a binary links the CUDA driver directly: $name"; exit 1; }
    [[ $name == libcublas* ]] && continue
    cp -L "$path" "$BUNDLE/lib/$name"
  done
strip --strip-unneeded "$BUNDLE"/lib/*.so* 2>/dev/null || true

# Every test program links the whole engine: compressed, the bundle is a fifth of its size.
tar -C "$BUILD" -cf - bundle | xz -T0 -6 >"$BUNDLE.tar.xz"
echo "bundle: $BUNDLE, to carry: $BUNDLE.tar.xz"
ls -la "$BUNDLE" "$BUNDLE/lib"
size_mib=$(du -m "$BUNDLE.tar.xz" | cut -f1)
echo "size: ${size_mib} MiB compressed"
if [ "$size_mib" -gt "$MAX_MIB" ]; then
  echo "the compressed bundle is over ${MAX_MIB} MiB: too large to carry"
  exit 1
fi
