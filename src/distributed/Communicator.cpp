#include "distributed/Communicator.h"

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "accumulate/CudaLibrary.h"
#include "distributed/Environment.h"

namespace shadowgrad::distributed {

namespace {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0; }

// Gloo binds to GLOO_SOCKET_IFNAME when set (as in PyTorch), to loopback when the master is on loopback
// (one machine), else to the address this host's name resolves to.
std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master_addr) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (master_addr.empty() || is_loopback(master_addr))
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// The c10d backend itself (ProcessGroupGloo and ProcessGroupNCCL are c10d::Backends since torch 2.0): shadowgrad
// needs no ProcessGroup's dispatch over devices, only the collectives.
c10::intrusive_ptr<c10d::Backend> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                  double timeout_s, c10::Device device,
                                                  const std::string& master_addr) {
  if (device.is_cuda()) {  // NCCL, from the CUDA library loaded at run time (accumulate/CudaLibrary.h)
    const auto* cuda = accumulate::cuda_library();
    if (!cuda || !cuda->make_nccl_backend)
      throw std::runtime_error("hardware=cuda with several processes needs NCCL from libshadowgrad_cuda.so: " +
                               accumulate::cuda_library_error());
    return c10::intrusive_ptr<c10d::Backend>::reclaim(cuda->make_nccl_backend(store.get(), rank, world, to_ms(timeout_s)));
  }
  auto opts = c10d::ProcessGroupGloo::Options::create(to_ms(timeout_s));
  opts->devices.push_back(gloo_device(master_addr));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

} // namespace

struct Communicator::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> group;
  int rank = 0, world = 1;
  double timeout_s = 0;
  c10::Device device{c10::kCPU};
  CollectiveCounts counts;

  // Waits for `work`; turns c10d's errors (peer gone, timeout) into one clear CollectiveError.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
    try {
      work->wait();
    } catch (const c10::Error& e) {
      fail(what, e.what_without_backtrace());
    } catch (const std::exception& e) {
      fail(what, e.what());
    }
  }
  [[noreturn]] void fail(const char* what, const std::string& cause) const {
    throw CollectiveError(fmt::format("rank {} of {}: {} failed: another process exited, crashed or did not answer "
                                      "within collective_timeout_s={} ({}){}",
                                      rank, world, what, timeout_s, first_line(cause),
                                      peers.empty() ? "" : " [the others: " + peers + "]"));
  }

  // Every rank posts its pid and host name, so that an error names the other processes: on several machines, which
  // one went away (Gloo's own timeout message names none).
  void introduce() {
    char host[256] = "?";
    ::gethostname(host, sizeof host - 1);
    const std::string me = fmt::format("pid {} on host {}", ::getpid(), host);
    store->set(fmt::format("shadowgrad/peer/{}", rank), std::vector<uint8_t>(me.begin(), me.end()));
    std::vector<std::string> others;
    for (int r = 0; r < world; ++r) {
      if (r == rank) continue;
      if (others.size() == kPeersNamed) {
        others.push_back(fmt::format("and {} more", world - 1 - kPeersNamed));
        break;
      }
      const auto them = store->get(fmt::format("shadowgrad/peer/{}", r));
      others.push_back(fmt::format("rank {}: {}", r, std::string(them.begin(), them.end())));
    }
    peers = fmt::format("{}", fmt::join(others, "; "));
  }
  static constexpr size_t kPeersNamed = 4;
  std::string peers;  // the others, as introduce() found them
};

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

std::shared_ptr<Communicator> Communicator::connect(const ProcessEnvironment& env, double timeout_s,
                                                    c10::Device device) {
  auto impl = std::make_unique<Impl>();
  impl->rank = env.rank;
  impl->world = env.world_size;
  impl->timeout_s = timeout_s;
  impl->device = device;
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.master_port);
    opts.isServer = env.rank == 0 && !env.agent_store;
    if (!env.agent_store) opts.numWorkers = static_cast<std::size_t>(env.world_size);
    opts.waitWorkers = !env.agent_store;
    opts.timeout = to_ms(timeout_s);
    impl->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    if (env.agent_store)
      impl->store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("/worker/attempt_{}", env.restart_count),
                                                           impl->store);
    impl->group = make_group(impl->store, env.rank, env.world_size, timeout_s, device, env.master_addr);
    impl->introduce();
  } catch (const c10::Error& e) {
    impl->fail("rendezvous at MASTER_ADDR:MASTER_PORT", fmt::format("{}:{}: {}", env.master_addr, env.master_port,
                                                                    e.what_without_backtrace()));
  } catch (const std::exception& e) {
    impl->fail("rendezvous at MASTER_ADDR:MASTER_PORT",
               fmt::format("{}:{}: {}", env.master_addr, env.master_port, e.what()));
  }
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

std::shared_ptr<Communicator> Communicator::connect_file(const std::string& path, int rank, int world_size,
                                                         double timeout_s) {
  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->world = world_size;
  impl->timeout_s = timeout_s;
  try {
    impl->store = c10::make_intrusive<c10d::FileStore>(path, world_size);
    impl->store->setTimeout(to_ms(timeout_s));
    impl->group = make_group(impl->store, rank, world_size, timeout_s, c10::Device(c10::kCPU), "");
    impl->introduce();
  } catch (const c10::Error& e) {
    impl->fail("rendezvous through a FileStore", e.what_without_backtrace());
  }
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::world_size() const { return impl_->world; }
std::string Communicator::backend() const { return impl_->group->getBackendName(); }
double Communicator::timeout_s() const { return impl_->timeout_s; }
c10::Device Communicator::device() const { return impl_->device; }
const CollectiveCounts& Communicator::counts() const { return impl_->counts; }

void Communicator::all_reduce_sum_(at::Tensor& t) {
  std::vector<at::Tensor> tensors{t};
  ++impl_->counts.all_reduce;
  impl_->counts.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  impl_->wait(impl_->group->allreduce(tensors), "all_reduce");
}

struct PendingCollective::State {
  c10::intrusive_ptr<c10d::Work> work;
  Communicator::Impl* impl = nullptr;
  const char* what = "all_reduce";
};

PendingCollective::PendingCollective() = default;
PendingCollective::~PendingCollective() = default;
PendingCollective::PendingCollective(PendingCollective&&) noexcept = default;
PendingCollective& PendingCollective::operator=(PendingCollective&&) noexcept = default;
bool PendingCollective::pending() const { return state_ && state_->work; }

void PendingCollective::wait() {
  if (!pending()) return;
  auto work = std::move(state_->work);
  state_->impl->wait(work, state_->what);
}

PendingCollective Communicator::start_all_reduce_sum(at::Tensor& t) {
  std::vector<at::Tensor> tensors{t};
  ++impl_->counts.all_reduce;
  impl_->counts.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  PendingCollective pending;
  pending.state_ = std::make_unique<PendingCollective::State>();
  pending.state_->impl = impl_.get();
  try {
    pending.state_->work = impl_->group->allreduce(tensors);
  } catch (const c10::Error& e) {
    impl_->fail("all_reduce", e.what_without_backtrace());
  }
  return pending;
}

PendingCollective Communicator::start_broadcast(at::Tensor& t, int root) {
  std::vector<at::Tensor> tensors{t};
  ++impl_->counts.broadcast;
  if (root == impl_->rank) impl_->counts.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  PendingCollective pending;
  pending.state_ = std::make_unique<PendingCollective::State>();
  pending.state_->impl = impl_.get();
  pending.state_->what = "broadcast";
  c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = to_ms(impl_->timeout_s);
  try {
    pending.state_->work = impl_->group->broadcast(tensors, options);
  } catch (const c10::Error& e) {
    impl_->fail("broadcast", e.what_without_backtrace());
  }
  return pending;
}

void Communicator::all_gather(std::vector<at::Tensor>& out, const at::Tensor& in) {
  std::vector<std::vector<at::Tensor>> outputs{out};
  std::vector<at::Tensor> inputs{in};
  ++impl_->counts.all_gather;
  impl_->counts.bytes += in.numel() * static_cast<int64_t>(in.element_size());
  impl_->wait(impl_->group->allgather(outputs, inputs), "all_gather");
  // Gloo writes into the tensors it was given, which share storage with `out`'s.
}

} // namespace shadowgrad::distributed
