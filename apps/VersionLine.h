#pragma once
// `--version` of the command-line tools: what a bug report needs (version, git commit, LibTorch).
#include <string>

#include "shadowgrad_version.h"  // generated at build time by cmake/WriteVersionHeader.cmake

inline std::string version_line(const std::string& tool) {
  return tool + " " SHADOWGRAD_VERSION " (git " SHADOWGRAD_GIT_COMMIT ", LibTorch " SHADOWGRAD_TORCH_VERSION ")";
}
