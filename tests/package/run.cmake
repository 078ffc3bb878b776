# Installs the build tree into a scratch prefix, then configures, builds and
# runs tests/package as a separate project against it.
# Inputs: -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=...
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}"
                        --prefix "${WORK_DIR}/prefix"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/package"
                        -B "${WORK_DIR}/build"
                        "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the example against the package failed")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORK_DIR}/build"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the example against the package failed")
endif()
execute_process(COMMAND "${WORK_DIR}/build/embedding_example"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "example printed: ${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the example failed: ${rc}")
endif()
if(NOT out MATCHES "w = 0.8 0.8 0.8 0.8")
  message(FATAL_ERROR "unexpected output: ${out}")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")

# The README shows this very example: keep them identical.
file(READ "${SOURCE_DIR}/tests/package/main.cpp" example)
file(READ "${SOURCE_DIR}/README.md" readme)
string(FIND "${readme}" "${example}" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "README.md's embedding example differs from "
                      "tests/package/main.cpp")
endif()
