#pragma once
// The rendezvous variables torchrun and SLURM users know: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// LOCAL_RANK and LOCAL_WORLD_SIZE, and torchrun's TORCHELASTIC_USE_AGENT_STORE and TORCHELASTIC_RESTART_COUNT.
// A single process needs none of them.
//
//   ProcessEnvironment env = ProcessEnvironment::from_environment();  // throws InputError on bad values
//   if (env.distributed()) { ... connect to env.master_addr:env.master_port as env.rank ... }
#include <string>

namespace shadowgrad::distributed {

struct ProcessEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // the GPU index on this node (cuda); unused on cpu
  int local_world_size = 1;  // the processes on this node, which share its memory (torchrun sets it)
  std::string master_addr;
  int master_port = 0;
  // torch >= 2.x's torchrun serves the TCPStore on MASTER_PORT itself (TORCHELASTIC_USE_AGENT_STORE=True): every
  // worker then connects as a client, and keys go under "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>/", so a
  // restarted group never reads the previous attempt's rendezvous (as torch.distributed's own init does).
  bool agent_store = false;
  int restart_count = 0;

  bool distributed() const { return world_size > 1; }

  // Reads the variables. WORLD_SIZE unset or 1 means one process and nothing else is required; with
  // WORLD_SIZE > 1, RANK, MASTER_ADDR and MASTER_PORT must all be set. Throws InputError naming the variable.
  static ProcessEnvironment from_environment();
};

} // namespace shadowgrad::distributed
