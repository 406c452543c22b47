# install.cmake - what `cmake --install` puts in place: the public headers, the shared and static
# libraries, the `flashattn` program, a CMake package (find_package(flashattn) gives the targets
# flashattn::flashattn and flashattn::flashattn_static; with COMPONENTS ring, where it was built,
# flashattn::flashattn_ring) and a pkg-config file flashattn.pc.
include(CMakePackageConfigHelpers)

set(FLASHATTN_PUBLIC_HEADERS ${PROJECT_SOURCE_DIR}/include/flashattn.h
  ${PROJECT_SOURCE_DIR}/include/flashattn_block_mask.h)
if(FLASHATTN_WITH_OPENCL)
  list(APPEND FLASHATTN_PUBLIC_HEADERS ${PROJECT_SOURCE_DIR}/include/flashattn_opencl.h)
endif()
if(FLASHATTN_WITH_CUDA)
  list(APPEND FLASHATTN_PUBLIC_HEADERS ${PROJECT_SOURCE_DIR}/include/flashattn_cuda.h)
endif()
install(FILES ${FLASHATTN_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(TARGETS flashattn flashattn_static EXPORT flashattnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(FLASHATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
install(EXPORT flashattnTargets NAMESPACE flashattn:: DESTINATION ${FLASHATTN_CMAKE_DIR})

# The static library's private dependencies become the consumer's link dependencies.
set(FLASHATTN_STATIC_DEPS "")
if(FLASHATTN_WITH_OPENCL)
  string(APPEND FLASHATTN_STATIC_DEPS "find_dependency(Threads)\n")
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/flashattnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flashattnConfig.cmake INSTALL_DESTINATION ${FLASHATTN_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashattnConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/flashattnConfigVersion.cmake
        DESTINATION ${FLASHATTN_CMAKE_DIR})

# pkg-config: `pkg-config --libs flashattn` for the shared library, `--static` adds what the
# static one needs.
set(FLASHATTN_PC_PRIVATE_LIBS "-lm")
if(CMAKE_DL_LIBS)
  string(APPEND FLASHATTN_PC_PRIVATE_LIBS " -l${CMAKE_DL_LIBS}")
endif()
# No -lOpenCL: the OpenCL ICD loader is loaded with dlopen at run time.
if(FLASHATTN_WITH_OPENCL AND CMAKE_THREAD_LIBS_INIT)
  string(APPEND FLASHATTN_PC_PRIVATE_LIBS " ${CMAKE_THREAD_LIBS_INIT}")
endif()
# The prefix is found relative to the .pc file, so `cmake --install --prefix` anywhere works.
file(RELATIVE_PATH FLASHATTN_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${PROJECT_SOURCE_DIR}/cmake/flashattn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/flashattn.pc
  @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashattn.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- ring attention (dist/), when built: its static library and headers, in an export set of
# its own that flashattnConfig.cmake includes only for find_package(flashattn COMPONENTS ring),
# so a user of the core alone needs no MPI.
if(TARGET flashattn_ring)
  install(FILES ${PROJECT_SOURCE_DIR}/include/flashattn_ring.h
                ${PROJECT_SOURCE_DIR}/include/flashattn_ring_mpi.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(TARGETS flashattn_ring EXPORT flashattnRingTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT flashattnRingTargets NAMESPACE flashattn:: DESTINATION ${FLASHATTN_CMAKE_DIR})
endif()
