include(GNUInstallDirs)
# The GA engine (src/accumulate): ShadowAccumulator, its folding casts and clipping, and the fused AdamW update that
# reads its shadows (src/optim: the trainer's FusedAdamW and Python's shadowgrad.optim.AdamW share it). It depends
# on LibTorch only, never on the trainer, so it is the part others install: exported as shadowgrad::shadowgrad
# (cmake/Install.cmake) and linked into the Python module (python/). Position-independent so a shared module can
# take it in.
file(GLOB SHADOWGRAD_ENGINE_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/accumulate/*.cpp
     ${CMAKE_SOURCE_DIR}/src/optim/*.cpp)
add_library(shadowgrad_engine STATIC ${SHADOWGRAD_ENGINE_SOURCES})
add_library(shadowgrad::shadowgrad ALIAS shadowgrad_engine)
set_target_properties(shadowgrad_engine PROPERTIES POSITION_INDEPENDENT_CODE ON EXPORT_NAME shadowgrad
                                                   OUTPUT_NAME shadowgrad_engine)
# In the tree: includes rooted at src/ ("accumulate/ShadowAccumulator.h") and include/ (<shadowgrad/shadowgrad.h>).
# Installed: <shadowgrad/shadowgrad.h> and <shadowgrad/accumulate/ShadowAccumulator.h>.
target_include_directories(shadowgrad_engine PUBLIC $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/src>
                                                    $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
                                                    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
# In the tree it links LibTorch's CPU part alone (shadowgrad_torch_cpu, cmake/Torch.cmake), like every CPU binary;
# an installed package's users link the whole torch, as they always have.
target_link_libraries(shadowgrad_engine PUBLIC $<BUILD_INTERFACE:shadowgrad_torch_cpu> $<INSTALL_INTERFACE:torch>
                                        PRIVATE ${CMAKE_DL_LIBS})
target_compile_features(shadowgrad_engine PUBLIC cxx_std_20)  # LibTorch >= 2.13 headers
target_compile_options(shadowgrad_engine PRIVATE -Wall -Wextra -Wno-unused-parameter)
# The CUDA part, libshadowgrad_cuda.so (src/accumulate/CudaLibrary.h loads it): built with a CUDA LibTorch, linked into
# no binary, loaded at run time by hardware=cuda alone (docs/cuda.md). It holds NCCL's process group, the GPU's
# properties and, with nvcc, the one-pass CUDA fold kernel; without nvcc ShadowAccumulator keeps at::add_ for CUDA
# shadows. The kernel includes no LibTorch header (nvcc compiles it as C++17, see shadowgradFindTorch.cmake).
# SHADOWGRAD_CUDA_ARCHITECTURES: 90 is H100/H200 machine code plus PTX that newer GPUs compile at load.
set(SHADOWGRAD_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures of the fold kernel")
if(SHADOWGRAD_TORCH_HAS_CUDA AND NOT CMAKE_CUDA_COMPILER_LOADED)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
  endif()
endif()
set(SHADOWGRAD_CUDA_FOLD OFF)
if(SHADOWGRAD_TORCH_HAS_CUDA)
  add_library(shadowgrad_cuda SHARED ${CMAKE_SOURCE_DIR}/src/accumulate/cuda/CudaLibraryEntry.cpp)
  target_include_directories(shadowgrad_cuda PRIVATE ${CMAKE_SOURCE_DIR}/src)
  # The whole torch (torch_cuda, c10_cuda, NCCL) and the wheel's CUDA headers; only the entry symbol is exported.
  target_link_libraries(shadowgrad_cuda PRIVATE torch shadowgrad_cuda_headers)
  set_target_properties(shadowgrad_cuda PROPERTIES CXX_VISIBILITY_PRESET hidden LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  target_compile_options(shadowgrad_cuda PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(CMAKE_CUDA_COMPILER_LOADED)
    target_sources(shadowgrad_cuda PRIVATE ${CMAKE_SOURCE_DIR}/src/accumulate/cuda/FoldKernel.cu)
    set_target_properties(shadowgrad_cuda PROPERTIES CUDA_ARCHITECTURES "${SHADOWGRAD_CUDA_ARCHITECTURES}")
    target_compile_definitions(shadowgrad_cuda PRIVATE SHADOWGRAD_WITH_CUDA_FOLD=1)
    set(SHADOWGRAD_CUDA_FOLD ON)
  endif()
  # Built before anything that links the engine, so that hardware=cuda finds it beside the binaries.
  add_dependencies(shadowgrad_engine shadowgrad_cuda)
endif()
message(STATUS "shadowgrad: CUDA library: ${SHADOWGRAD_TORCH_HAS_CUDA}, with the CUDA fold kernel: ${SHADOWGRAD_CUDA_FOLD}")
