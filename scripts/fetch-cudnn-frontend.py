#!/usr/bin/env python3
"""Fetch the cuDNN frontend's headers (NVIDIA's header-only C++ graph API over
cuDNN, MIT licence) into third_party/cudnn-frontend/include, where CMake looks for
them: the CUDA backend's fused attention (src/device/cuda/cuda_cudnn_attention.cu)
is built with them. Debian has no package of it, so it comes from PyPI's
nvidia-cudnn-frontend wheel (the headers in every wheel are the same), pinned by
version and SHA-256. Standard library only.

    scripts/fetch-cudnn-frontend.py            # fetch unless already there
    scripts/fetch-cudnn-frontend.py --if-cuda  # only where nvcc and cudnn.h exist (make deps)

Exit 0 when the headers are in place (or, with --if-cuda, not wanted); 1 with the
reason when they could not be fetched (the build then goes on without cuDNN's
attention: trident's own kernels run it)."""
import hashlib
import io
import os
import re
import shutil
import sys
import urllib.request
import zipfile

VERSION = "1.32.0"
WHEEL = f"nvidia_cudnn_frontend-{VERSION}-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
SHA256 = "c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0"
INDEX = "https://pypi.org/simple/nvidia-cudnn-frontend/"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEST = os.path.join(ROOT, "third_party", "cudnn-frontend")
STAMP = os.path.join(DEST, "VERSION")


def cuda_present():
    nvcc = shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
    heads = ["/usr/local/cuda/include/cudnn.h", "/usr/include/cudnn.h", "/usr/local/include/cudnn.h",
             "/usr/include/x86_64-linux-gnu/cudnn.h"]
    return bool(nvcc) and any(os.path.exists(h) for h in heads)


def wheel_url():
    page = urllib.request.urlopen(INDEX, timeout=60).read().decode()
    for href in re.findall(r'href="([^"]+)"', page):
        if href.split("#")[0].endswith("/" + WHEEL):
            return href.split("#")[0]
    raise RuntimeError(f"{INDEX} does not list {WHEEL}")


def main():
    if "--if-cuda" in sys.argv[1:] and not cuda_present():
        return 0
    if os.path.exists(STAMP) and open(STAMP).read().strip() == VERSION:
        return 0
    try:
        data = urllib.request.urlopen(wheel_url(), timeout=300).read()
    except Exception as e:  # noqa: BLE001 - any network failure: say so, build without it
        print(f"fetch-cudnn-frontend: cannot download {WHEEL} from PyPI: {e}", file=sys.stderr)
        return 1
    got = hashlib.sha256(data).hexdigest()
    if got != SHA256:
        print(f"fetch-cudnn-frontend: {WHEEL} has SHA-256 {got}, expected {SHA256}", file=sys.stderr)
        return 1
    tmp = DEST + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for n in z.namelist():
            if n.startswith("include/") or "/licenses/" in n:
                z.extract(n, tmp)
    lic = os.path.join(tmp, f"nvidia_cudnn_frontend-{VERSION}.dist-info", "licenses")
    os.rename(lic, os.path.join(tmp, "licenses"))
    shutil.rmtree(os.path.join(tmp, f"nvidia_cudnn_frontend-{VERSION}.dist-info"))
    with open(os.path.join(tmp, "VERSION"), "w") as f:
        f.write(VERSION + "\n")
    shutil.rmtree(DEST, ignore_errors=True)
    os.makedirs(os.path.dirname(DEST), exist_ok=True)
    os.rename(tmp, DEST)  # whole or not at all
    print(f"fetch-cudnn-frontend: cuDNN frontend {VERSION} headers in {DEST}/include")
    return 0


if __name__ == "__main__":
    sys.exit(main())
