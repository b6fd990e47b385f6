#pragma once
// TensorBoard event files (enable_tensorboard): each metrics.jsonl line becomes one Event at its step, with a scalar
// per numeric field, tagged with the field's name (loss, eval_loss, lr, grad_norm, tokens_per_s, gns_tokens,
// rewards_*, ...). The file is TensorFlow's TFRecord framing (length, masked CRC-32C of the length, the bytes, their
// masked CRC-32C) around hand-encoded Event protobufs, flushed at each step so `tensorboard --logdir` follows the run.
// A process opens a new file whose name sorts after the directory's earlier ones, and starts it with a SessionLog
// START at its first step: TensorBoard then drops what an earlier process logged from that step on (the steps after
// the checkpoint a resumed run went back to), as metrics.jsonl is cut back.
//
//   TensorBoardWriter tb(run_dir + "/tensorboard", first_step);   // first_step: the step this process logs first
//   tb.write(step, {{"loss", 2.5}, {"lr", 1e-3}});                // non-finite values are left out, as null in JSON
#include <cstdint>
#include <cstdio>
#include <string>

#include "train/MetricsWriter.h"

namespace shadowgrad::train {

class TensorBoardWriter {
 public:
  TensorBoardWriter(const std::string& dir, int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event at `step` holding every finite field but "step" as a float scalar.
  void write(int64_t step, const JsonNumbers& fields);
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::FILE* file_ = nullptr;
  std::string path_;
};

// CRC-32C (Castagnoli), as TFRecord uses it, and its mask. crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

} // namespace shadowgrad::train
