"""Builds shadowgrad._C for the torch of this environment: `pip install --no-build-isolation .` (docs/python.md).

The same sources as CMake's shadowgrad_python target (python/CMakeLists.txt): the bindings and the GA engine
(src/accumulate, src/optim). The version comes from CMakeLists.txt's project(VERSION), the one place it is written;
the torch this build sees is written into shadowgrad/_build_info.py, which the package checks at import.

SHADOWGRAD_PREBUILT_DIR=<a CMake build folder of this project> packages the module that build already compiled
instead of compiling it again (ctest pip_install, so that a fresh clone's suite compiles the module once). The build
folder's python/prebuilt_module.txt says what it compiled; the install refuses a build for another torch or
interpreter, or from another list of sources than the one below. Without the variable, `pip install` compiles.
"""
import glob
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile

import torch
from setuptools import setup
from setuptools.command.build_ext import build_ext
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
SOURCES = ["python/csrc/bindings.cpp"] + engine


def read_prebuilt_manifest(build_dir):
    """python/prebuilt_module.txt of a CMake build folder (written by python/CMakeLists.txt): key=value lines,
    `source=` once per source compiled into the module."""
    path = os.path.join(build_dir, "python", "prebuilt_module.txt")
    if not os.path.isfile(path):
        raise SystemExit(f"SHADOWGRAD_PREBUILT_DIR={build_dir}: no {path}; configure and build that folder first "
                         "(./scripts/build.sh), or unset SHADOWGRAD_PREBUILT_DIR to compile the module here")
    manifest = {"source": []}
    with open(path) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            if key == "source":
                manifest["source"].append(value)
            elif key:
                manifest[key] = value
    return path, manifest


def check_prebuilt(build_dir):
    """Refuses a prebuilt module that is not what this checkout would compile for this environment."""
    path, manifest = read_prebuilt_manifest(build_dir)
    if manifest.get("torch_version") != torch.__version__:
        raise SystemExit(f"{path}: the module was built against torch {manifest.get('torch_version')}, but this "
                         f"environment has torch {torch.__version__}")
    if manifest.get("ext_suffix") != sysconfig.get_config_var("EXT_SUFFIX"):
        raise SystemExit(f"{path}: the module was built for {manifest.get('ext_suffix')}, but this interpreter "
                         f"loads {sysconfig.get_config_var('EXT_SUFFIX')}")
    built, own = sorted(manifest["source"]), sorted(s.replace(os.sep, "/") for s in SOURCES)
    if built != own:
        raise SystemExit(f"{path}: CMake compiled the module from other sources than setup.py does; only in CMake: "
                         f"{sorted(set(built) - set(own))}, only in setup.py: {sorted(set(own) - set(built))}")


class BuildExtPrebuilt(build_ext):
    """Copies the module a CMake build compiled (SHADOWGRAD_PREBUILT_DIR), through `cmake --install --component
    python`, which also drops the build tree's RUNPATH, as a compiled module has none."""

    def build_extension(self, ext):
        build_dir = os.path.abspath(os.environ["SHADOWGRAD_PREBUILT_DIR"])
        check_prebuilt(build_dir)
        cmake = shutil.which("cmake")
        if cmake is None:
            raise SystemExit("SHADOWGRAD_PREBUILT_DIR needs cmake on PATH to install the prebuilt module")
        with tempfile.TemporaryDirectory() as prefix:
            subprocess.run([cmake, "--install", build_dir, "--component", "python", "--prefix", prefix],
                           check=True, stdout=subprocess.DEVNULL)
            name = "_C" + sysconfig.get_config_var("EXT_SUFFIX")
            found = glob.glob(os.path.join(prefix, "**", "shadowgrad", name), recursive=True)
            if len(found) != 1:
                raise SystemExit(f"cmake --install {build_dir} --component python installed {len(found)} {name}")
            target = self.get_ext_fullpath(ext.name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(found[0], target)
            shutil.copymode(found[0], target)
        print(f"shadowgrad: packaged the module built in {build_dir} (SHADOWGRAD_PREBUILT_DIR), not compiled")


PREBUILT = bool(os.environ.get("SHADOWGRAD_PREBUILT_DIR"))
setup(
    version=VERSION,
    packages=["shadowgrad"],
    package_dir={"shadowgrad": "python/shadowgrad"},
    ext_modules=[
        CppExtension(
            "shadowgrad._C",
            SOURCES,
            include_dirs=[os.path.join(ROOT, "src"), os.path.join(ROOT, "include")],
            define_macros=[("SHADOWGRAD_VERSION", f'"{VERSION}"'), ("NDEBUG", None)],
            # The engine's flags in CMake (cmake/Engine.cmake): OpenMP (torch's own runtime is the one loaded),
            # and the two that let its loops vectorise without changing a result.
            extra_compile_args=["-std=c++20", "-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math"],
            extra_link_args=["-fopenmp"],
        )
    ],
    cmdclass={"build_ext": BuildExtPrebuilt if PREBUILT else BuildExtension, "build_py": BuildPyWithBuildInfo},
)
