// The intra-op thread count num_threads=0 chooses (train/Runtime.h): it never gives the processes of one host more
// threads than their cores, it takes an explicit OMP_NUM_THREADS (torchrun's), and it counts the CPUs this process
// may run on, not the machine's. And the environment the trainer re-execs with (apps/ThreadEnvironment.h): OpenMP's
// threads sleep when they wait, whatever the dtype, unless the user said otherwise.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>

#include <sched.h>

#include "../apps/ThreadEnvironment.h"
#include "ScopedEnv.h"
#include "train/Runtime.h"

using shadowgrad::train::choose_threads;
using shadowgrad::train::thread_inputs;
using shadowgrad::train::ThreadInputs;

namespace {

ThreadInputs thread_case(int64_t requested, int cores, int local_world, std::optional<int> omp = std::nullopt) {
  return {.requested = requested, .affinity_cores = cores, .local_world_size = local_world, .omp_num_threads = omp};
}

} // namespace

TEST_CASE("num_threads=0 divides the process's cores among the processes of its host", "[threads]") {
  CHECK(choose_threads(thread_case(0, 16, 1)) == 16);
  CHECK(choose_threads(thread_case(0, 16, 2)) == 8);
  CHECK(choose_threads(thread_case(0, 16, 3)) == 5);
  CHECK(choose_threads(thread_case(0, 2, 2)) == 1);
  CHECK(choose_threads(thread_case(0, 2, 4)) == 1);  // more processes than cores: one thread each, never zero
  CHECK(choose_threads(thread_case(0, 3, 2)) == 1);
}

TEST_CASE("an explicit num_threads wins, then OMP_NUM_THREADS", "[threads]") {
  CHECK(choose_threads(thread_case(3, 16, 4, 1)) == 3);   // the key is the most specific choice
  CHECK(choose_threads(thread_case(0, 16, 2, 1)) == 1);   // torchrun's OMP_NUM_THREADS=1
  CHECK(choose_threads(thread_case(0, 16, 1, 12)) == 12);
  CHECK(choose_threads(thread_case(0, 2, 1, 4)) == 4);    // the user's word, even above the cores
}

TEST_CASE("thread_inputs reads LOCAL_WORLD_SIZE, OMP_NUM_THREADS and the affinity mask", "[threads]") {
  {
    ScopedEnv world("LOCAL_WORLD_SIZE", "4"), omp("OMP_NUM_THREADS", "3,2");
    const auto in = thread_inputs(0);
    CHECK(in.local_world_size == 4);
    REQUIRE(in.omp_num_threads);
    CHECK(*in.omp_num_threads == 3);  // an OpenMP list: its first level
  }
  for (const char* bad : {"", "0", "-1", "two"}) {
    ScopedEnv world("LOCAL_WORLD_SIZE", bad), omp("OMP_NUM_THREADS", bad);
    INFO("value '" << bad << "'");
    const auto in = thread_inputs(0);
    CHECK(in.local_world_size == 1);
    CHECK_FALSE(in.omp_num_threads);
  }
  {
    ScopedEnv world("LOCAL_WORLD_SIZE", nullptr), omp("OMP_NUM_THREADS", nullptr);
    CHECK(thread_inputs(0).local_world_size == 1);
    CHECK_FALSE(thread_inputs(0).omp_num_threads);
  }
  // `taskset -c 0 trainer ...`: one CPU is what the process may use, whatever the machine has.
  cpu_set_t all, one;
  REQUIRE(sched_getaffinity(0, sizeof(all), &all) == 0);
  CHECK(thread_inputs(0).affinity_cores == CPU_COUNT(&all));
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
  const int seen = thread_inputs(0).affinity_cores;
  REQUIRE(sched_setaffinity(0, sizeof(all), &all) == 0);
  CHECK(seen == 1);
}

TEST_CASE("the re-exec sets OMP_WAIT_POLICY=passive and keeps the user's value", "[threads]") {
  // The other variables it may set are given, so that only the wait policy can change.
  ScopedEnv timeout("OPENBLAS_THREAD_TIMEOUT", "4"), coretype("OPENBLAS_CORETYPE", "HASWELL");
  {
    ScopedEnv unset("OMP_WAIT_POLICY", nullptr);
    CHECK(shadowgrad::apps::set_thread_environment());  // changed: the caller re-execs
    REQUIRE(std::getenv("OMP_WAIT_POLICY"));
    CHECK(std::string(std::getenv("OMP_WAIT_POLICY")) == "passive");
  }
  ScopedEnv mine("OMP_WAIT_POLICY", "active");
  CHECK_FALSE(shadowgrad::apps::set_thread_environment());
  CHECK(std::string(std::getenv("OMP_WAIT_POLICY")) == "active");
}
