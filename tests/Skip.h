#pragma once
// SG_SKIP(reason): report the running test case as skipped, never as passed.
// A case that may call it is tagged [can_skip]: ctest runs each such case in a process of its own with
// SHADOWGRAD_SKIP_EXIT_CODE set to its SKIP_RETURN_CODE (tests/CMakeLists.txt), so exiting with that code shows
// "Skipped" with the reason in the output. The other cases run one process per test file, where an exit would end
// the file's remaining cases: there (SHADOWGRAD_SKIP_FORBIDDEN set) SG_SKIP fails the case, asking for the tag.
// Run by hand, the binary warns and goes on to the next test case.
#include <cstdlib>
#include <iostream>

#include <catch2/catch.hpp>

#define SG_SKIP(reason)                                                                  \
  do {                                                                                   \
    if (std::getenv("SHADOWGRAD_SKIP_FORBIDDEN"))                                        \
      FAIL("SG_SKIP in a test case without the [can_skip] tag (tests/Skip.h): " << reason); \
    if (const char* code = std::getenv("SHADOWGRAD_SKIP_EXIT_CODE")) {                   \
      std::cout << "skipped: " << reason << std::endl;                                   \
      std::_Exit(std::atoi(code));                                                       \
    }                                                                                    \
    WARN("skipped: " << reason);                                                         \
    return;                                                                              \
  } while (0)
