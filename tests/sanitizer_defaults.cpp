// SPDX-License-Identifier: BSD-3-Clause
// Linked into every executable of the sanitizer build (tests and apps), so
// the settings hold however a program is started: by ctest, by a test that
// starts the apps as processes, or by hand. Variables in the environment
// (UBSAN_OPTIONS, LSAN_OPTIONS) still override them.

extern "C" {

// UBSan halts at any report its suppressions (CAF 0.17's known ones) do not
// cover; suppressions only apply because UBSan is built recoverable.
const char* __ubsan_default_options() {
  return "halt_on_error=1:print_stacktrace=1:suppressions=" ACTORPS_UBSAN_SUPP;
}

// CAF 0.17.6 sometimes leaves its BASP broker alive at process exit under
// load; what hangs off it is reported as indirect leaks allocated inside
// CAF (no actorps frame in 101 reports over 20 looped runs). Debian's libcaf
// has no frame pointers, so stacks stop inside the library: suppress by
// module. Allocations made by actorps code keep full leak checking.
//
// The apps leave UCX's worker and context to the process's exit
// (leave_ucx_to_exit: UCX 1.13 can abort in its own teardown), so what
// UCX allocated is still held there: suppressed by module too.
//
// OpenSSL 3 keeps a thread's error queue (ERR_STATE, 904 bytes, allocated
// by CRYPTO_zalloc on the thread's first call that touches it) under a
// pthread key and frees it when the thread ends. A server's exit was seen
// once (1 of 408 sanitizer tests) to report exactly one such block as a
// direct leak with no frame outside libcrypto: suppressed by module like
// the libraries above.
const char* __lsan_default_suppressions() {
  return "leak:libcaf_core.so\n"
         "leak:libcaf_io.so\n"
         "leak:libucp.so\n"
         "leak:libucs.so\n"
         "leak:libuct.so\n"
         "leak:libcrypto.so\n";
}

} // extern "C"
