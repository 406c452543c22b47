# cuda.cmake - the CUDA backend: finding the Toolkit headers, its sources and its embedded kernel.
#
# The backend needs only cuda.h and nvrtc.h at build time, for types and prototypes: the driver
# (libcuda.so.1) and NVRTC are loaded with dlopen at run time, so nothing CUDA is linked and the
# library runs on machines without a GPU (the backend then reports itself unavailable).
#
# flashattn_cuda_find() sets FLASHATTN_CUDA_INCLUDE_DIR (cuda.h and nvrtc.h) when found:
# find_package(CUDAToolkit) first, then CUDA_HOME / CUDA_PATH / /usr/local/cuda.
# flashattn_cuda_configure(target) adds backends/cuda/*.c and the generated C files holding
# kernels_cu/*.cu (flash_common, flash_kv, flash_fwd, flash_bwd, flash_bwd_mma, flash_bwd_rows,
# flash_merge) and
# src/kernel_params.h as byte arrays.
include(${CMAKE_CURRENT_LIST_DIR}/embed_text.cmake)

set(FLASHATTN_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/../backends/cuda/cuda.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/cuda/cuda_device.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/cuda/cuda_interop.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/cuda/cuda_loader.c
  ${CMAKE_CURRENT_LIST_DIR}/../backends/cuda/cuda_module.c)

function(flashattn_cuda_find)
  find_package(CUDAToolkit QUIET)
  set(hints "")
  if(CUDAToolkit_FOUND)
    list(APPEND hints ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  foreach(root $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda)
    list(APPEND hints ${root}/include)
  endforeach()
  find_path(FLASHATTN_CUDA_INCLUDE_DIR NAMES cuda.h nvrtc.h HINTS ${hints}
    DOC "Folder with the CUDA Toolkit's cuda.h and nvrtc.h")
  if(FLASHATTN_CUDA_INCLUDE_DIR AND NOT EXISTS ${FLASHATTN_CUDA_INCLUDE_DIR}/nvrtc.h)
    unset(FLASHATTN_CUDA_INCLUDE_DIR CACHE)
  endif()
endfunction()

function(flashattn_cuda_configure target)
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/generated)
  set(embedded "")
  foreach(name flash_common flash_kv flash_fwd flash_bwd flash_bwd_mma flash_bwd_rows
      flash_merge)
    flashattn_embed_text(${PROJECT_SOURCE_DIR}/kernels_cu/${name}.cu fa__cu_embed_${name} c)
    list(APPEND embedded ${c})
  endforeach()
  flashattn_embed_text(${PROJECT_SOURCE_DIR}/src/kernel_params.h
                       fa__cu_embed_kernel_params params_c)
  target_sources(${target} PRIVATE ${FLASHATTN_CUDA_SOURCES} ${embedded} ${params_c})
  target_include_directories(${target} PRIVATE
    ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/backends/cuda)
  # SYSTEM: the Toolkit's headers are not held to the project's warnings.
  target_include_directories(${target} SYSTEM PRIVATE ${FLASHATTN_CUDA_INCLUDE_DIR})
endfunction()

# `flashattn plan --arch` plans for a known architecture through the backend's internal table.
function(flashattn_cuda_configure_cli target)
  target_compile_definitions(${target} PRIVATE FLASHATTN_WITH_CUDA)
  # flashattn_cuda.h (fa_cuda_compiler for `flashattn devices`) includes cuda.h.
  target_include_directories(${target} SYSTEM PRIVATE ${FLASHATTN_CUDA_INCLUDE_DIR})
endfunction()
