# find_package(Torch) for a torch wheel, CUDA builds included, on a machine whose CUDA toolkit is only nvcc and
# its runtime: the wheel's own CUDA libraries lie in the nvidia-* wheels beside it. Used by the build
# (cmake/Torch.cmake) and installed with the package, so that find_package(shadowgrad) finds the same torch the same way.
# find_package(Torch) overwrites CMAKE_CUDA_ARCHITECTURES with its own list: keep the caller's choice.
set(shadowgrad_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
# With a CUDA wheel, find_package(Torch) enables CUDA and builds a probe with CMAKE_CUDA_STANDARD (default: the C++
# standard). Debian's CMake 3.25 knows no CUDA20 for nvcc, so CUDA sources are C++17 (ours include no torch header),
# and without a GPU to probe, the architectures come from TORCH_CUDA_ARCH_LIST (9.0: H100/H200).
if(NOT DEFINED CMAKE_CUDA_STANDARD)
  set(CMAKE_CUDA_STANDARD 17)
endif()
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT DEFINED TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST 9.0)
endif()
# The machine's nvcc may be on PATH only through a link (/usr/local/bin/nvcc): FindCUDA needs the toolkit's root.
find_program(SHADOWGRAD_NVCC nvcc HINTS /usr/local/cuda/bin)
if(SHADOWGRAD_NVCC AND NOT DEFINED CUDA_TOOLKIT_ROOT_DIR)
  file(REAL_PATH ${SHADOWGRAD_NVCC} shadowgrad_nvcc_real)
  get_filename_component(shadowgrad_cuda_root ${shadowgrad_nvcc_real} DIRECTORY)
  get_filename_component(shadowgrad_cuda_root ${shadowgrad_cuda_root} DIRECTORY)
  set(CUDA_TOOLKIT_ROOT_DIR ${shadowgrad_cuda_root})
  if(NOT DEFINED CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${shadowgrad_cuda_root}/bin/nvcc)
  endif()
endif()
# A CUDA wheel's own CUDA libraries (nvrtc among them) lie in the nvidia-* wheels beside torch, which the machine's
# toolkit may lack: look there first. (torch/share/cmake is a CMAKE_PREFIX_PATH entry; site-packages is 3 up.)
foreach(prefix ${CMAKE_PREFIX_PATH})
  list(APPEND shadowgrad_nvidia_lib_hints ${prefix}/../../../nvidia/cu13/lib ${prefix}/../../../nvidia/cuda_nvrtc/lib)
endforeach()
find_library(CUDA_nvrtc_LIBRARY NAMES nvrtc libnvrtc.so.13 libnvrtc.so.12 HINTS ${shadowgrad_nvidia_lib_hints})
find_package(Torch REQUIRED)
if(shadowgrad_cuda_archs)
  set(CMAKE_CUDA_ARCHITECTURES "${shadowgrad_cuda_archs}")
endif()
