"""shadowgrad.__version__ is CMake's project(VERSION), the one place the version is written."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

import shadowgrad

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class VersionTest(unittest.TestCase):
    def test_version_comes_from_cmake(self):
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            declared = re.search(r"project\(shadowgrad VERSION (\S+)", f.read()).group(1)
        self.assertEqual(shadowgrad.__version__, declared)

    def test_built_for_this_torch(self):
        self.assertEqual(shadowgrad._build_info.TORCH_VERSION, torch.__version__)

    def test_another_torch_fails_with_one_line_naming_both(self):
        # The package as built, but told it was built against another torch: the import must refuse in one line
        # instead of loading _C (which, built for another torch, would fail with an undefined symbol).
        with tempfile.TemporaryDirectory() as tmp:
            copy = shutil.copytree(os.path.dirname(shadowgrad.__file__), os.path.join(tmp, "shadowgrad"))
            with open(os.path.join(copy, "_build_info.py"), "w") as f:
                f.write("TORCH_VERSION = '2.99.0+other'\n")
            env = dict(os.environ, PYTHONPATH=tmp)
            r = subprocess.run([sys.executable, "-c", "import shadowgrad"], env=env, cwd=tmp, capture_output=True,
                               text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        last = r.stderr.strip().splitlines()[-1]
        self.assertIn("ImportError: shadowgrad was built against torch 2.99.0+other", last)
        self.assertIn(f"this environment has torch {torch.__version__}", last)


if __name__ == "__main__":
    unittest.main()
