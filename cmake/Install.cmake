# `cmake --install build --prefix PREFIX`: the GA engine as a CMake package. A consumer writes
#   find_package(shadowgrad REQUIRED)
#   target_link_libraries(app PRIVATE shadowgrad::shadowgrad)   # brings LibTorch (found by shadowgradFindTorch.cmake)
# and includes <shadowgrad/shadowgrad.h>. The trainer, its CLI and its internals are not installed.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SHADOWGRAD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/shadowgrad)
install(TARGETS shadowgrad_engine EXPORT shadowgradTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The CUDA part the engine loads at run time (src/accumulate/CudaLibrary.h): a program in bin/ finds it in ../lib. It
# keeps the path to torch's libraries it was linked with, to find libtorch_cuda there.
if(TARGET shadowgrad_cuda)
  set_target_properties(shadowgrad_cuda PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS shadowgrad_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# The public headers: ShadowAccumulator.h and StochasticRounding.h (its rounding modes, and the rounding kernels
# for code of one's own, with their bit-level rules in RoundingBits.h), which include nothing else of the project (the internal ShadowState.h and
# FoldingCast.h stay private; the fold casts are ShadowAccumulator::cast/gather_rows), and util/Hash.h, which
# StochasticRounding.h includes by a relative path.
install(FILES ${CMAKE_SOURCE_DIR}/src/accumulate/ShadowAccumulator.h
              ${CMAKE_SOURCE_DIR}/src/accumulate/StochasticRounding.h
              ${CMAKE_SOURCE_DIR}/src/accumulate/RoundingBits.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/shadowgrad/accumulate)
install(FILES ${CMAKE_SOURCE_DIR}/include/shadowgrad/shadowgrad.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/shadowgrad)
install(FILES ${CMAKE_SOURCE_DIR}/src/util/Hash.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/shadowgrad/util)
install(EXPORT shadowgradTargets NAMESPACE shadowgrad:: DESTINATION ${SHADOWGRAD_CMAKE_DIR})
# The torch the package was built against (torch/share/cmake, above Torch_DIR): shadowgradConfig.cmake falls back to
# it when a consumer names no torch of its own.
get_filename_component(SHADOWGRAD_BUILT_TORCH_PREFIX "${Torch_DIR}" DIRECTORY)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/shadowgradConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/shadowgradConfig.cmake INSTALL_DESTINATION ${SHADOWGRAD_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/shadowgradConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/shadowgradConfig.cmake ${CMAKE_BINARY_DIR}/shadowgradConfigVersion.cmake
              ${CMAKE_SOURCE_DIR}/cmake/shadowgradFindTorch.cmake
        DESTINATION ${SHADOWGRAD_CMAKE_DIR})
