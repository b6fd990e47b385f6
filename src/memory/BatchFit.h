#pragma once
// Which microbatch fits a memory budget, predicted from a measurement (per_device_batch_size=auto, and the fit check
// of an explicit one when memory_budget_mib is set). A probe runs one forward + backward at two microbatch sizes
// b1 < b2 and reads the tracking allocator's peaks; the peak is linear in the microbatch, so
//   predicted_peak(b) = peak(b1) + (b - b1) x per_sequence + state_added_later,  per_sequence = (peak(b2)-peak(b1))/(b2-b1)
// where state_added_later is the persistent state that did not exist during the probe but will at every later step,
// known exactly (AdamW's moments, created at the first update).
//
//   MicrobatchModel m = MicrobatchModel::fit({1, p1, 2, p2}, optimizer_state_bytes);
//   auto pick = largest_fitting(m, /*local batch*/ 8, budget_bytes);   // the largest divisor of 8 that fits
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shadowgrad::memory {

// Peaks (tracked bytes, absolute) of one forward + backward at two microbatch sizes.
struct ProbePeaks {
  int64_t small_batch = 1, small_peak = 0, large_batch = 2, large_peak = 0;
};

struct MicrobatchModel {
  int64_t at_zero = 0;       // predicted peak at 0 sequences: persistent state and the fixed transients
  int64_t per_sequence = 0;  // bytes each sequence of the microbatch adds to the peak

  static MicrobatchModel fit(const ProbePeaks& peaks, int64_t state_added_later);
  int64_t predicted_peak(int64_t microbatch) const { return at_zero + per_sequence * microbatch; }
};

struct MicrobatchChoice {
  int64_t microbatch = 0;
  int64_t predicted_peak = 0;
};

// The largest divisor of `local_batch` (global_batch_size / WORLD_SIZE) whose predicted peak is at most `budget`;
// nullopt when not even 1 fits.
std::optional<MicrobatchChoice> largest_fitting(const MicrobatchModel& model, int64_t local_batch, int64_t budget);

// What a run's memory is made of and what each lever would save on this model, for the message of a run that does
// not fit. Bytes; a lever's saving is 0 when it is already set (or does not apply).
struct MemoryEstimate {
  int64_t weights = 0, optimizer_state = 0, shadow_tree = 0;
  int64_t per_sequence = 0;
  int64_t peak_at_one = 0;          // predicted peak at microbatch 1
  int64_t save_grad_bf16 = 0;       // grad_dtype=bfloat16: 2 B/param off a float32 shadow tree
  int64_t save_adam_bf16 = 0;       // adam_state_dtype=bfloat16: half of float32 AdamW moments
  int64_t save_remat_full = -1;     // remat_policy=full, measured at microbatch 1; -1 when not measured
};

// "... needs 1234 MiB at per_device_batch_size=1, over the budget of 500 MiB: weights 189 MiB, optimizer state
// 378 MiB, shadow tree 189 MiB, 121 MiB per sequence. Levers on this model: ..."
std::string does_not_fit_message(const MemoryEstimate& estimate, int64_t microbatch, int64_t predicted, int64_t budget,
                                 const std::string& budget_source);

// Bytes in MiB: whole from 100 MiB up, 3 significant digits below ("1210", "0.0865"); mib() adds " MiB".
std::string mib_number(int64_t bytes);
std::string mib(int64_t bytes);

} // namespace shadowgrad::memory
