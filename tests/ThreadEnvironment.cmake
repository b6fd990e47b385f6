# Read by ctest, not by cmake (tests/CMakeLists.txt names it in TEST_INCLUDE_FILES): it sets ctest's own
# environment, which every test process inherits. A variable already set is kept, as the trainer keeps it.
#
# Why: most of the suite is many short processes, 4 at a time on 2 cores (scripts/test.sh).
#   - The thread settings build/trainer and build/generate set and then re-exec for (apps/ThreadEnvironment.h):
#     given up front, a test's trainer starts once instead of twice (0.45 s of CPU instead of 0.78 s for a 2-step
#     tiny run, 2026-12-06).
#   - OMP_NUM_THREADS=1 for the test processes that compute in-process (Catch2's, the Python tests): with 2 OpenMP
#     threads each beside 3 other busy tests, a parallel region waits for a descheduled thread (python/tests: 37 s
#     with 2 threads, 25-34 s with 1, at load 4). A test that means a thread count sets it (at::set_num_threads).
# test_signals unsets the re-exec's variables again (ENVIRONMENT_MODIFICATION): it checks the start-up window,
# re-exec included, as a user's trainer has it.
set(shadowgrad_test_thread_environment OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OPENBLAS_THREAD_TIMEOUT=4)
# The trainer sets OPENBLAS_CORETYPE only where torch reports avx512_bf16; the kernel's flag is the same CPUID bit.
file(STRINGS /proc/cpuinfo shadowgrad_cpu_flags REGEX "^flags" LIMIT_COUNT 1)
if(shadowgrad_cpu_flags MATCHES "[ \t]avx512_bf16([ \t]|$)")
  list(APPEND shadowgrad_test_thread_environment OPENBLAS_CORETYPE=COOPERLAKE)
endif()
foreach(pair IN LISTS shadowgrad_test_thread_environment)
  string(REGEX MATCH "^([^=]+)=(.*)$" _ "${pair}")
  if(NOT DEFINED ENV{${CMAKE_MATCH_1}})
    set(ENV{${CMAKE_MATCH_1}} "${CMAKE_MATCH_2}")
  endif()
endforeach()
