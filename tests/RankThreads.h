#pragma once
// Data parallel in one test process: each rank is a thread with its own ProcessGroupGloo, meeting through a
// c10d::FileStore in a fresh temp directory (no ports, so ctest -j is safe).
//
//   auto errors = run_ranks(2, [&](distributed::Communicator& comm) { ... comm.rank() ... });
//   require_no_errors(errors);
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "distributed/Communicator.h"

namespace {

// Runs fn(comm) on `world` threads, one rank each, and returns what each threw ("" when nothing).
std::vector<std::string> run_ranks(int world,
                                   const std::function<void(shadowgrad::distributed::Communicator&)>& fn,
                                   double timeout_s = 30) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             ("sg_dist_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = shadowgrad::distributed::Communicator::connect_file((dir / "store").string(), r, world, timeout_s);
        fn(*comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty message)";
      }
    });
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
  return errors;
}

void require_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
}

std::shared_ptr<shadowgrad::distributed::Communicator> share(shadowgrad::distributed::Communicator& comm) {
  return std::shared_ptr<shadowgrad::distributed::Communicator>(&comm, [](shadowgrad::distributed::Communicator*) {});
}

} // namespace
