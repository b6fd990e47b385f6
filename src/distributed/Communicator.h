#pragma once
// The collectives shadowgrad needs, on LibTorch's c10d: ProcessGroupGloo on CPU, ProcessGroupNCCL for CUDA
// tensors when LibTorch was built with it. c10d headers stay in Communicator.cpp.
//
//   auto comm = Communicator::connect(env, /*timeout_s=*/300, device);  // TCPStore rendezvous on MASTER_ADDR:PORT
//   at::Tensor n = at::full({1}, local_tokens, at::kLong);
//   comm->all_reduce_sum_(n);            // every process now holds the sum
//   comm->counts().all_reduce            // collectives issued so far, by kind (tests count them per step)
//
// Every collective waits at most timeout_s for the other processes. If a peer dies or hangs, the call throws
// CollectiveError (a std::runtime_error) instead of blocking forever.
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace shadowgrad::distributed {

struct ProcessEnvironment;

class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How many collectives this process issued, by kind, and the bytes it contributed to them.
struct CollectiveCounts {
  int64_t all_reduce = 0;
  int64_t all_gather = 0;
  int64_t broadcast = 0;
  int64_t bytes = 0;
  int64_t total() const { return all_reduce + all_gather + broadcast; }
};

// A collective that has been started and not yet waited for (Communicator::start_all_reduce_sum).
class PendingCollective {
 public:
  PendingCollective();
  ~PendingCollective();
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;
  // Blocks until the collective is done (Gloo), or makes the current CUDA stream wait for it (NCCL). Throws
  // CollectiveError as the blocking calls do. Waiting twice is a no-op.
  void wait();
  bool pending() const;

 private:
  friend class Communicator;
  struct State;
  std::unique_ptr<State> state_;
};

class Communicator {
 public:
  // Rendezvous through c10d::TCPStore: rank 0 serves it on master_port, the others connect to master_addr.
  // `device`: cuda selects NCCL (when built with it), cpu selects Gloo.
  static std::shared_ptr<Communicator> connect(const ProcessEnvironment& env, double timeout_s, c10::Device device);
  // Rendezvous through c10d::FileStore at `path` (a file on a shared file system; tests use a temp dir).
  static std::shared_ptr<Communicator> connect_file(const std::string& path, int rank, int world_size,
                                                    double timeout_s);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world_size() const;
  std::string backend() const;
  double timeout_s() const;
  // Where the tensors given to the collectives must live: cuda for NCCL, cpu for Gloo.
  c10::Device device() const;

  // In-place sum over all processes. `t` must be contiguous; Gloo accepts float, double and integer types.
  void all_reduce_sum_(at::Tensor& t);
  // The same sum, started and returned without waiting: `t` must stay alive and untouched until wait(). Every process
  // must start its collectives in the same order.
  PendingCollective start_all_reduce_sum(at::Tensor& t);
  // Rank `root`'s `t` copied into every process's `t` (same size and dtype everywhere, contiguous; any dtype: bytes
  // travel), started without waiting, as start_all_reduce_sum. Only the root counts the bytes: it is the one that
  // sends them.
  PendingCollective start_broadcast(at::Tensor& t, int root);
  // out[r] receives rank r's `in`; every tensor has in's size and dtype.
  void all_gather(std::vector<at::Tensor>& out, const at::Tensor& in);

  const CollectiveCounts& counts() const;

 private:
  friend class PendingCollective;
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace shadowgrad::distributed
