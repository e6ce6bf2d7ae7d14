#!/usr/bin/env bash
# trident's libraries for a machine that cannot reach a package mirror (an
# air-gapped GPU node, a cluster's compute node): download Debian 12's packages
# on a machine that can, carry the folder over, unpack them there without root.
#
#   scripts/offline-deps.sh download DIR   # here: apt-get download into DIR/debs
#   scripts/offline-deps.sh unpack DIR     # there: dpkg -x into DIR/root, write DIR/env.sh
#   . DIR/env.sh                           # then cmake / make / trident find them
#
# The packages are the libraries of scripts/install-deps.sh that a machine with a
# compiler, CMake, MPI and (for GPUs) the CUDA toolkit may lack: oneDNN, OpenBLAS
# (OpenMP build), cJSON and PCRE2, with their headers and the runtime libraries
# they load (about 22 MB). env.sh puts
# DIR/root/usr on CMAKE_PREFIX_PATH (CMakeLists.txt looks for the OpenMP OpenBLAS
# under it too) and its library folders on LD_LIBRARY_PATH. Built for Debian 12
# (glibc 2.36), the libraries also run on newer glibc (Ubuntu 24.04).
set -eu
pkgs=(libdnnl-dev libdnnl2 libopenblas-openmp-dev libopenblas0-openmp libopenblas-dev
  libcjson-dev libcjson1 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  ocl-icd-libopencl1 libgfortran5 libquadmath0) # the last three: what oneDNN and OpenBLAS
# load themselves, which a GPU image need not have

usage() {
  echo "usage: $0 download DIR | unpack DIR" >&2
  exit 2
}
[ $# -eq 2 ] || usage
dir=$2

case $1 in
  download)
    mkdir -p "$dir/debs"
    # apt-get download writes into the current directory, as the _apt user when it
    # can: a folder only root can write makes it fall back to root, with a warning
    (cd "$dir/debs" && apt-get download "${pkgs[@]}")
    echo "offline-deps: $(ls "$dir/debs" | wc -l) packages in $dir/debs ($(du -sh "$dir/debs" | cut -f1)); carry $dir over and run: $0 unpack $dir"
    ;;
  unpack)
    shopt -s nullglob
    debs=("$dir"/debs/*.deb)
    [ ${#debs[@]} -gt 0 ] || { echo "offline-deps: no .deb files in $dir/debs (run '$0 download $dir' where a mirror is reachable)" >&2; exit 1; }
    root=$(cd "$dir" && pwd)/root
    mkdir -p "$root"
    for d in "${debs[@]}"; do dpkg -x "$d" "$root"; done
    lib=$root/usr/lib/x86_64-linux-gnu
    cat >"$dir/env.sh" <<EOF
# trident's unpacked libraries (scripts/offline-deps.sh): source this file
export CMAKE_PREFIX_PATH=$root/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}
export LD_LIBRARY_PATH=$lib:$lib/openblas-openmp\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
EOF
    echo "offline-deps: ${#debs[@]} packages unpacked into $root; now: . $dir/env.sh"
    ;;
  *) usage ;;
esac
