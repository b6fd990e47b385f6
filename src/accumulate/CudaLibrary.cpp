#include "accumulate/CudaLibrary.h"

#include <filesystem>
#include <vector>

#include <dlfcn.h>

namespace shadowgrad::accumulate {

namespace {

struct LoadedLibrary {
  const CudaLibrary* library = nullptr;
  std::string error;
};

// Where to look: beside the binary or module holding this code (build/trainer, build/libshadowgrad_cuda.so), its
// ../lib (an installed bin/ and lib/), then the name alone (LD_LIBRARY_PATH, the system's paths).
std::vector<std::string> library_candidates() {
  std::vector<std::string> out;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuda_library), &info) && info.dli_fname) {
    std::error_code ec;
    const auto self = std::filesystem::canonical("/proc/self/exe", ec);
    // dladdr names the executable by argv[0] when the code is in it: /proc/self/exe is its real path.
    std::filesystem::path object = info.dli_fname;
    if (!ec && (object.is_relative() || std::filesystem::equivalent(object, self, ec))) object = self;
    const auto dir = object.parent_path();
    out.push_back((dir / kCudaLibraryName).string());
    out.push_back((dir.parent_path() / "lib" / kCudaLibraryName).string());
  }
  out.emplace_back(kCudaLibraryName);
  return out;
}

LoadedLibrary load_library() {
  LoadedLibrary result;
  std::string tried;
  for (const auto& path : library_candidates()) {
    if (path.find('/') != std::string::npos && !std::filesystem::exists(path)) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      result.error = std::string("cannot load ") + path + ": " + (why ? why : "unknown error");
      if (path.find('/') == std::string::npos && tried.size()) result.error += " (not found at " + tried + ")";
      return result;
    }
    auto entry = reinterpret_cast<const CudaLibrary* (*)()>(dlsym(handle, kCudaLibrarySymbol));
    const CudaLibrary* library = entry ? entry() : nullptr;
    if (!library || library->abi != kCudaLibraryAbi) {
      result.error = path + " is not this build's CUDA library (no " + kCudaLibrarySymbol + " of ABI " +
                     std::to_string(kCudaLibraryAbi) + "): rebuild it with the trainer";
      return result;
    }
    result.library = library;
    return result;
  }
  return result;
}

const LoadedLibrary& loaded_library() {
  static const LoadedLibrary once = load_library();
  return once;
}

} // namespace

const CudaLibrary* cuda_library() { return loaded_library().library; }

std::string cuda_library_error() {
  const auto& l = loaded_library();
  if (l.library) return "";
  if (!l.error.empty()) return l.error;
  return std::string("no ") + kCudaLibraryName + " beside this program: it is built only against a CUDA LibTorch";
}

} // namespace shadowgrad::accumulate
