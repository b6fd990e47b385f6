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
target_link_libraries(shadowgrad_engine PUBLIC torch)
target_compile_features(shadowgrad_engine PUBLIC cxx_std_20)  # LibTorch >= 2.13 headers
target_compile_options(shadowgrad_engine PRIVATE -Wall -Wextra -Wno-unused-parameter)
# The one-pass CUDA fold (src/accumulate/cuda): with a CUDA LibTorch and nvcc, its kernel joins the engine, and CUDA
# shadows fold through it; without them ShadowAccumulator keeps at::add_ for non-CPU shadows. The kernel includes no
# LibTorch header (nvcc compiles it as C++17, see shadowgradFindTorch.cmake). SHADOWGRAD_CUDA_ARCHITECTURES: 90 is
# H100/H200 machine code plus PTX that newer GPUs compile at load.
set(SHADOWGRAD_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures of the fold kernel")
if(SHADOWGRAD_TORCH_HAS_CUDA AND NOT CMAKE_CUDA_COMPILER_LOADED)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
  endif()
endif()
if(SHADOWGRAD_TORCH_HAS_CUDA AND CMAKE_CUDA_COMPILER_LOADED)
  add_library(shadowgrad_cuda_fold OBJECT ${CMAKE_SOURCE_DIR}/src/accumulate/cuda/FoldKernel.cu)
  target_include_directories(shadowgrad_cuda_fold PRIVATE ${CMAKE_SOURCE_DIR}/src)
  set_target_properties(shadowgrad_cuda_fold PROPERTIES POSITION_INDEPENDENT_CODE ON
                                                        CUDA_ARCHITECTURES "${SHADOWGRAD_CUDA_ARCHITECTURES}")
  target_sources(shadowgrad_engine PRIVATE $<TARGET_OBJECTS:shadowgrad_cuda_fold>)
  target_compile_definitions(shadowgrad_engine PRIVATE SHADOWGRAD_WITH_CUDA_FOLD=1)
  set(SHADOWGRAD_CUDA_FOLD ON)
else()
  set(SHADOWGRAD_CUDA_FOLD OFF)
endif()
message(STATUS "shadowgrad: CUDA fold kernel: ${SHADOWGRAD_CUDA_FOLD}")
