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

# The same example, built with one plain compiler call whose flags come from
# the installed pkg-config file (no CMake, no -I into the source tree).
find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
file(GLOB_RECURSE pc_files "${WORK_DIR}/prefix/*/actorps.pc")
list(LENGTH pc_files n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one installed actorps.pc, found: ${pc_files}")
endif()
get_filename_component(pc_dir "${pc_files}" DIRECTORY)
execute_process(COMMAND "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${pc_dir}"
                        "${PKG_CONFIG}" --cflags --libs actorps
                RESULT_VARIABLE rc OUTPUT_VARIABLE pc_flags
                ERROR_VARIABLE pc_err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs actorps failed: ${pc_err}")
endif()
message(STATUS "pkg-config flags: ${pc_flags}")
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
execute_process(COMMAND "${CXX}" "${SOURCE_DIR}/tests/package/main.cpp"
                        ${pc_flags} -o "${WORK_DIR}/pc_example"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the example with pkg-config's flags failed:"
                      "\n${err}")
endif()
execute_process(COMMAND "${WORK_DIR}/pc_example" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "w = 0.8 0.8 0.8 0.8")
  message(FATAL_ERROR "the pkg-config example failed (${rc}): ${out}")
endif()

# The installed Python package, when the build has one: imported from the
# prefix's site directory alone, it runs a round trip.
file(GLOB_RECURSE py_init "${WORK_DIR}/prefix/*/__init__.py")
list(FILTER py_init INCLUDE REGEX "/actorps/__init__\\.py$")
if(PYTHON AND py_init)
  get_filename_component(pkg_dir "${py_init}" DIRECTORY)
  get_filename_component(site_dir "${pkg_dir}" DIRECTORY)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${site_dir}" "${PYTHON}" -c
      "import numpy as np, actorps
kv = actorps.KVStore.create('local')
kv.init('w', np.zeros(4, np.float32))
kv.push('w', np.full(4, 0.8, np.float32))
out = np.zeros(4, np.float32)
kv.wait(kv.pull('w', out))
kv.close()
assert actorps.__file__.startswith('${site_dir}'), actorps.__file__
print('w =', *out)"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "w = 0.8 0.8 0.8 0.8")
    message(FATAL_ERROR "the installed Python package failed: ${out}${err}")
  endif()
  message(STATUS "the installed Python package printed: ${out}")
  # The installed launcher finds the package and the apps beside it. (The
  # worker pulls once before it closes: its server's UCX connection back to
  # it is then up, and UCX 1.13 can abort a process whose peer leaves while
  # their connection is still being set up; README, "A known UCX 1.13
  # defect".)
  execute_process(
    COMMAND "${WORK_DIR}/prefix/bin/actorps-launch" --workers 1 --
            "${PYTHON}" -c "import actorps, numpy as np
kv = actorps.KVStore.create('dist')
kv.init('w', np.full(4, 0.5, np.float32))
out = np.zeros(4, np.float32)
kv.wait(kv.pull('w', out))
print('launched worker of', kv.num_workers, 'pulled', *out)
kv.close()"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "launched worker of 1 pulled 0.5 0.5 0.5 0.5")
    message(FATAL_ERROR "the installed actorps-launch failed: ${out}${err}")
  endif()
elseif(PYTHON)
  message(FATAL_ERROR "no Python package installed under ${WORK_DIR}/prefix")
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

