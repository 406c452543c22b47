# opencl.cmake - the OpenCL backend's sources and its embedded kernel text.
#
# flashattn_opencl_configure(target) adds backends/opencl/*.c and a generated C file holding
# kernels_cl/flash_fwd.cl, kernels_cl/flash_bwd.cl and src/kernel_params.h as byte arrays (flashattn_embed_text from
# cmake/embed_text.cmake, run at build time, so editing a kernel rebuilds the library). The
# caller links OpenCL::OpenCL.

set(FLASHATTN_OPENCL_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/opencl.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl_device.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl_program.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl_interop.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/opencl/cl_profiles.c)

include(${CMAKE_CURRENT_LIST_DIR}/embed_text.cmake)

function(flashattn_opencl_configure target)
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/generated)
  flashattn_embed_text(${PROJECT_SOURCE_DIR}/kernels_cl/flash_fwd.cl
                       fa__cl_embed_flash_fwd fwd_c)
  flashattn_embed_text(${PROJECT_SOURCE_DIR}/kernels_cl/flash_bwd.cl
                       fa__cl_embed_flash_bwd bwd_c)
  flashattn_embed_text(${PROJECT_SOURCE_DIR}/src/kernel_params.h
                       fa__cl_embed_kernel_params params_c)
  target_sources(${target} PRIVATE ${FLASHATTN_OPENCL_SOURCES} ${fwd_c} ${bwd_c} ${params_c})
  target_include_directories(${target} PRIVATE
    ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/backends/opencl)
  target_link_libraries(${target} PRIVATE OpenCL::OpenCL)
  target_compile_definitions(${target} PRIVATE CL_TARGET_OPENCL_VERSION=120)
endfunction()
