# opencl.cmake - the OpenCL backend's sources and its embedded kernel text.
#
# flashattn_opencl_configure(target) adds backends/opencl/*.c and generated C files holding
# kernels_cl/*.cl and src/kernel_params.h as byte arrays (flashattn_embed_text from
# cmake/embed_text.cmake, run at build time, so editing a kernel rebuilds the library).
# Only OpenCL's headers are used: the ICD loader is loaded with dlopen at run time
# (backends/opencl/cl_loader.c), so the library links no OpenCL and runs without one.

set(FLASHATTN_OPENCL_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/opencl.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl_device.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl_program.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl_interop.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl_loader.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl_profiles.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl_rules.c)

include(${CMAKE_CURRENT_LIST_DIR}/embed_text.cmake)

function(flashattn_opencl_configure target)
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/generated)
  set(kernels_c "")
  foreach(name flash_common flash_storage flash_softmax flash_modifiers flash_dropout
               flash_sequences flash_fwd flash_blocks flash_fwd_blocked flash_merge flash_bwd
               flash_bwd_blocked)
    flashattn_embed_text(${PROJECT_SOURCE_DIR}/kernels_cl/${name}.cl
                         fa__cl_embed_${name} kernel_c)
    list(APPEND kernels_c ${kernel_c})
  endforeach()
  flashattn_embed_text(${PROJECT_SOURCE_DIR}/src/kernel_params.h
                       fa__cl_embed_kernel_params params_c)
  target_sources(${target} PRIVATE ${FLASHATTN_OPENCL_SOURCES} ${kernels_c} ${params_c})
  target_include_directories(${target} PRIVATE
    ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/backends/opencl)
  # SYSTEM: the headers are not held to the project's warnings (as an imported target's).
  target_include_directories(${target} SYSTEM PRIVATE ${OpenCL_INCLUDE_DIRS})
  target_compile_definitions(${target} PRIVATE CL_TARGET_OPENCL_VERSION=120)
endfunction()
