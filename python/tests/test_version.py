"""shadowgrad.__version__ is CMake's project(VERSION), the one place the version is written."""
import os
import re
import unittest

import shadowgrad

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class VersionTest(unittest.TestCase):
    def test_version_comes_from_cmake(self):
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            declared = re.search(r"project\(shadowgrad VERSION (\S+)", f.read()).group(1)
        self.assertEqual(shadowgrad.__version__, declared)


if __name__ == "__main__":
    unittest.main()
