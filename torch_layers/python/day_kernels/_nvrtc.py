"""Finding NVRTC, which compiles the kernels at first use.

The extension loads ``libnvrtc.so.13`` by name. A PyTorch built for CUDA 13 installs it from
the ``nvidia-cuda-nvrtc`` wheel under ``site-packages/nvidia/cu13/lib``, which is on no library
path; loading it here first, by its full path, lets the extension's load find it already in the
process. Where it is not there, the library path is searched as usual (a CUDA install).
"""

import ctypes
import os
import sys

_LIBRARIES = ("libnvrtc-builtins.so.13.0", "libnvrtc.so.13")
_FOLDERS = (("nvidia", "cu13", "lib"), ("nvidia", "cuda_nvrtc", "lib"))


def preload():
    """Loads the wheel's NVRTC when one is installed; does nothing otherwise."""
    for root in sys.path:
        for folder in _FOLDERS:
            lib = os.path.join(root or ".", *folder)
            if os.path.exists(os.path.join(lib, "libnvrtc.so.13")):
                for name in _LIBRARIES:
                    path = os.path.join(lib, name)
                    if os.path.exists(path):
                        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return
