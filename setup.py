"""Builds shadowgrad._C for the torch of this environment: `pip install --no-build-isolation .` (docs/python.md).

The same sources as CMake's shadowgrad_python target (python/CMakeLists.txt): the bindings and the GA engine
(src/accumulate, src/optim). The version comes from CMakeLists.txt's project(VERSION), the one place it is written;
the torch this build sees is written into shadowgrad/_build_info.py, which the package checks at import.
"""
import glob
import os
import re

import torch
from setuptools import setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def read_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(shadowgrad VERSION (\S+)", f.read()).group(1)


VERSION = read_version()


class BuildPyWithBuildInfo(build_py):
    """Writes shadowgrad/_build_info.py next to the package's sources in the wheel."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "shadowgrad", "_build_info.py")
        with open(target, "w") as f:
            f.write(f"# Written at build time (setup.py).\nTORCH_VERSION = {torch.__version__!r}\n")


engine = sorted(glob.glob(os.path.join("src", "accumulate", "*.cpp")) + glob.glob(os.path.join("src", "optim", "*.cpp")))
setup(
    version=VERSION,
    packages=["shadowgrad"],
    package_dir={"shadowgrad": "python/shadowgrad"},
    ext_modules=[
        CppExtension(
            "shadowgrad._C",
            ["python/csrc/bindings.cpp"] + engine,
            include_dirs=[os.path.join(ROOT, "src"), os.path.join(ROOT, "include")],
            define_macros=[("SHADOWGRAD_VERSION", f'"{VERSION}"'), ("NDEBUG", None)],
            # The engine's flags in CMake (cmake/Engine.cmake): OpenMP (torch's own runtime is the one loaded),
            # and the two that let its loops vectorise without changing a result.
            extra_compile_args=["-std=c++20", "-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math"],
            extra_link_args=["-fopenmp"],
        )
    ],
    cmdclass={"build_ext": BuildExtension, "build_py": BuildPyWithBuildInfo},
)
