# embed_text.cmake - flashattn_embed_text(), shared by the OpenCL and CUDA backends: embeds one
# text file (a kernel, kernel_params.h) as `const unsigned char <name>[]` in a generated C file,
# with cmake/embed.cmake run at build time so editing the text rebuilds the library.
include_guard(GLOBAL)

# Embeds one text file as `const unsigned char <name>[]` into ${out_var} (a generated .c path).
function(flashattn_embed_text input name out_var)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/generated/${name}.c)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${input} -DOUTPUT=${out} -DNAME=${name}
            -P ${PROJECT_SOURCE_DIR}/cmake/embed.cmake
    DEPENDS ${input} ${PROJECT_SOURCE_DIR}/cmake/embed.cmake
    COMMENT "Embedding ${input}"
    VERBATIM)
  set(${out_var} ${out} PARENT_SCOPE)
endfunction()
