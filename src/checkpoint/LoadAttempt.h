#pragma once
// Trying one step-N checkpoint on every process together, for Checkpointer::restore() and load():
//
//   Attempt a = attempt(dir, step, options, topology, model, optimizer, /*restoring=*/true);
//   if (a.state) return *a.state;                       // every rank loaded step N
//   if (a.agreed.verdict != Verdict::kCorrupt) give_up(a);  // every rank throws the same kind of error
//
// Each process checks every file's size and CRC against the manifest, then reads what it keeps (the parameters, the
// RNG state, its optimizer state) and checks it against the model before anything is changed: a file that passes
// its CRC and still cannot be read (crafted or re-signed) is found here. Then the processes agree on one verdict
// (checkpoint/Agreement.h), and only then does any of them load, fall back or give up.
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "checkpoint/Agreement.h"
#include "checkpoint/CheckpointOptions.h"
#include "checkpoint/Manifest.h"
#include "checkpoint/OptimizerShards.h"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace shadowgrad::checkpoint {

struct Attempt {
  std::optional<TrainState> state;  // set when every rank loaded
  Agreed agreed;                    // otherwise the verdict (never kLoadable), named by the lowest rank with it
  std::exception_ptr own;           // this process's error, when it is the one the verdict names
};

// Collective. Loads `dir` (which must hold step `step`) into the model, the optimizer and the CPU RNG when every
// rank can; otherwise leaves the model and the RNG untouched. `restoring`: for restore(), so the step must not be
// past options.steps, and rank 0 logs the config keys that changed since the checkpoint was written.
Attempt attempt(const std::string& dir, int64_t step, const CheckpointOptions& options, const Topology& topology,
                torch::nn::Module& model, torch::optim::Optimizer& optimizer, bool restoring);

// Throws what the agreed verdict says: this process's own error when it found it, else the same kind of error
// quoting the rank that did (exit 2 for a corrupt checkpoint or bad input on every rank, exit 1 for anything else).
[[noreturn]] void give_up(const Attempt& a);

} // namespace shadowgrad::checkpoint
