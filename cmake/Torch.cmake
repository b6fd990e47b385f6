# LibTorch, from the torch wheel of the Python environment (scripts/lib/setup.sh passes its cmake_prefix_path).
# Refuses a torch outside the range this code base is written and tested for, naming both.
set(SHADOWGRAD_TORCH_MIN 2.11)  # the GPU machine's torch (docs/setup.md); 2.13, 2.14 and 2.15 are built here
set(SHADOWGRAD_TORCH_BELOW 2.16)
include(${CMAKE_CURRENT_LIST_DIR}/shadowgradFindTorch.cmake)  # installed too: shadowgradConfig.cmake uses it
if(Torch_VERSION VERSION_LESS SHADOWGRAD_TORCH_MIN OR NOT Torch_VERSION VERSION_LESS SHADOWGRAD_TORCH_BELOW)
  message(FATAL_ERROR "found torch ${Torch_VERSION} (${Torch_DIR}); shadowgrad needs torch >= ${SHADOWGRAD_TORCH_MIN} "
                      "and < ${SHADOWGRAD_TORCH_BELOW}: point CMAKE_PREFIX_PATH at such a torch's "
                      "torch.utils.cmake_prefix_path, or let scripts/lib/setup.sh make its venv")
endif()
# A CUDA wheel: TORCH_LIBRARIES holds torch_cuda and c10_cuda.
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(SHADOWGRAD_TORCH_HAS_CUDA ON)
else()
  set(SHADOWGRAD_TORCH_HAS_CUDA OFF)
endif()
# What the CPU binaries link: LibTorch's CPU part alone (libtorch_cpu, libc10). The wheel's `torch` target
# (TORCH_LIBRARIES) also links libtorch.so, which needs libtorch_cuda and through it cuBLAS, cuDNN, NCCL and more:
# every CPU process then maps them (a tiny run held 527 MiB of RSS). What needs CUDA is in libshadowgrad_cuda.so,
# loaded at run time (cmake/Engine.cmake, docs/cuda.md). A CUDA wheel's libtorch_cpu itself still needs libcudart
# and libcupti (the profiler's), a few MiB.
add_library(shadowgrad_torch_cpu INTERFACE)
target_link_libraries(shadowgrad_torch_cpu INTERFACE torch_cpu_library c10)
target_include_directories(shadowgrad_torch_cpu SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
separate_arguments(shadowgrad_torch_cxx_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(shadowgrad_torch_cpu INTERFACE ${shadowgrad_torch_cxx_flags})
target_compile_features(shadowgrad_torch_cpu INTERFACE cxx_std_20)
# The wheel's CUDA headers (ATen/cuda includes cusparse.h, cublas_v2.h) lie in the nvidia-* wheels beside torch,
# not in the machine's CUDA toolkit: sources that include them take this target.
add_library(shadowgrad_cuda_headers INTERFACE)
if(SHADOWGRAD_TORCH_HAS_CUDA)
  find_path(SHADOWGRAD_CUDA_LIBRARY_HEADERS cusparse.h
            HINTS ${TORCH_INSTALL_PREFIX}/../nvidia/cu13/include ${TORCH_INSTALL_PREFIX}/../nvidia/cusparse/include
                  ${CUDA_TOOLKIT_ROOT_DIR}/include)
  if(NOT SHADOWGRAD_CUDA_LIBRARY_HEADERS)
    message(FATAL_ERROR "a CUDA torch, but no cusparse.h beside it (nvidia/cu13/include) or in the CUDA toolkit")
  endif()
  # NCCL's header, for c10d's ProcessGroupNCCL.hpp: in the nvidia-nccl wheel.
  find_path(SHADOWGRAD_NCCL_HEADERS nccl.h HINTS ${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include)
  if(NOT SHADOWGRAD_NCCL_HEADERS)
    message(FATAL_ERROR "a CUDA torch, but no nccl.h beside it (nvidia/nccl/include)")
  endif()
  target_include_directories(shadowgrad_cuda_headers SYSTEM INTERFACE ${SHADOWGRAD_CUDA_LIBRARY_HEADERS}
                                                                       ${SHADOWGRAD_NCCL_HEADERS})
endif()
message(STATUS "shadowgrad: torch ${Torch_VERSION} from ${Torch_DIR} (CUDA: ${SHADOWGRAD_TORCH_HAS_CUDA})")

# fmt: the wheel ships fmt 12's headers in torch/include, which every torch target puts on the include path; spdlog
# (Debian's, built with fmt 9) and our code must see Debian's fmt 9 instead, the one libfmt.so.9 implements. A
# folder holding only a link to Debian's fmt/ goes first on the include path of every target that uses fmt.
# (fmt's versioned inline namespaces keep torch's own fmt 12 code apart at link time.)
find_package(fmt REQUIRED)
get_target_property(shadowgrad_fmt_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
list(GET shadowgrad_fmt_dirs 0 shadowgrad_fmt_dir)
set(SHADOWGRAD_FMT_FIRST_DIR ${CMAKE_BINARY_DIR}/fmt-first)
file(MAKE_DIRECTORY ${SHADOWGRAD_FMT_FIRST_DIR})
file(CREATE_LINK ${shadowgrad_fmt_dir}/fmt ${SHADOWGRAD_FMT_FIRST_DIR}/fmt SYMBOLIC)
add_library(shadowgrad_fmt_first INTERFACE)
target_include_directories(shadowgrad_fmt_first SYSTEM BEFORE INTERFACE ${SHADOWGRAD_FMT_FIRST_DIR})
target_link_libraries(shadowgrad_fmt_first INTERFACE fmt::fmt)
