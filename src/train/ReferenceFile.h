#pragma once
// The file format of the preference reference (train/PreferenceReference.h keeps one per pair set in the run
// directory: reference_logps.bin, reference_logps.eval.bin). Little-endian:
//   64-byte header: magic "SGREFLP\0", u32 version (2), u32 0, then u64 each: the pairs' fingerprint, the starting
//                   weights' fingerprint, how the pass grouped the pairs, pairs, pairs per microbatch, microbatches;
//   one byte per microbatch (1: scored), padded with zeros to a multiple of 8;
//   2 doubles per pair (chosen, rejected summed answer log-probs), in the pair file's order of kept pairs.
//
//   StoredReference s;
//   if (read_reference_file(path, s) == ReferenceFileState::ok && s.complete()) use(s.logps);
//   write_reference_file(path, s);  // atomically
#include <cstdint>
#include <string>
#include <vector>

namespace shadowgrad::train {

// A reference file's contents: its fingerprints, the microbatches done (1 byte each) and the values (2 per kept pair,
// file order).
struct StoredReference {
  uint64_t data = 0, start = 0, how = 0;
  int64_t chunk = 0;
  std::vector<uint8_t> done;
  std::vector<double> logps;
  int64_t done_count() const;
  bool complete() const { return done_count() == int64_t(done.size()); }
};

enum class ReferenceFileState { none, earlier_version, unreadable, ok };

// Reads `path` into `s` (only when it returns ok); none when there is no such file.
ReferenceFileState read_reference_file(const std::string& path, StoredReference& s);
// Writes `s` to `path` atomically.
void write_reference_file(const std::string& path, const StoredReference& s);
// The refusal for a file of version 1 (one file for train and eval pairs), which this trainer does not read.
std::string earlier_version_message(const std::string& path);

} // namespace shadowgrad::train
