# python.cmake - the shared library inside the Python package, for `pip install .`
# (scikit-build-core sets SKBUILD and installs the component "python" into the wheel).
# A copy of libflashattn without a version in its file name, so the wheel holds one plain file
# (wheels keep no symbolic links) that python/flashattn/_lib.py loads by ctypes.
add_library(flashattn_python SHARED $<TARGET_OBJECTS:flashattn_obj>)
set_target_properties(flashattn_python PROPERTIES OUTPUT_NAME flashattn_py)
if(MATH_LIBRARY)
  target_link_libraries(flashattn_python PRIVATE ${MATH_LIBRARY})
endif()
target_link_libraries(flashattn_python PRIVATE ${CMAKE_DL_LIBS})
if(FLASHATTN_WITH_OPENCL)
  target_link_libraries(flashattn_python PRIVATE Threads::Threads)
endif()
install(TARGETS flashattn_python LIBRARY DESTINATION flashattn COMPONENT python)
