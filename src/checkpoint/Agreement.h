#pragma once
// What every process of a run must agree on before any acts on it, through Topology::exchange (an all-gather):
// rank 0's list of numbers, every rank's text, and the verdict on a checkpoint. With one process nothing is sent.
//
//   std::vector<int64_t> steps = from_rank0(topology, topology.rank == 0 ? my_steps : std::vector<int64_t>{});
//   Agreed a = agree(topology, {Verdict::kCorrupt, "checkpoint file '...' is corrupt: ..."});
//   if (a.verdict != Verdict::kLoadable) ... every rank gives up, or falls back, together
//
// A bad checkpoint must give the same answer on every rank: were one rank to exit 2 naming a truncated shard while
// another, still waiting in a collective, exits 1 with "Connection closed by peer", the run's exit code would be
// whichever the launcher saw first.
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/OptimizerShards.h"

namespace shadowgrad::checkpoint {

// Rank 0's `mine` on every rank (the others' is not used). Collective.
std::vector<int64_t> from_rank0(const Topology& topology, const std::vector<int64_t>& mine);
// Every rank's `mine`, in rank order. Collective.
std::vector<std::string> gather_texts(const Topology& topology, const std::string& mine);

// What trying a checkpoint came to on one process; the worst over all processes decides.
enum class Verdict : int64_t {
  kLoadable = 0,
  kCorrupt = 1,   // CorruptCheckpointError: fall back to an earlier checkpoint, or exit 2
  kBadInput = 2,  // another InputError (a frozen key, the global batch): exit 2
  kFailed = 3,    // anything else: exit 1
};

struct Outcome {
  Verdict verdict = Verdict::kLoadable;
  std::string message;  // empty when loadable
};

struct Agreed {
  Verdict verdict = Verdict::kLoadable;
  int rank = 0;         // the lowest rank with that verdict
  std::string message;  // that rank's message
};

// The worst outcome over every rank. Collective: one all-gather when every rank can load, two otherwise.
Agreed agree(const Topology& topology, const Outcome& mine);

} // namespace shadowgrad::checkpoint
