#pragma once
// The weights of a run's checkpoint and nothing else, for the tools that read a run another process may be writing
// (export_hf, generate): no optimizer is built or read, no RNG state is touched, and nothing in the run directory is
// removed or renamed (Checkpointer::restore() tidies .tmp-step-N away, which is a live trainer's checkpoint in the
// making).
//
//   model::Decoder model(model::DecoderOptions::from_config(cfg));   // cfg: the run's config.yml
//   const int64_t step = checkpoint::load_weights(run_dir, -1, *model);   // the latest loadable step-N
//
// What is loaded is exactly model.named_parameters(), by name, from step-N/model.pt (or, in flat order, from a ZeRO-3
// run's model-shard files put together); a tensor the file holds beyond them is ignored. With lora_rank > 0 those are the adapters: the frozen base is the model's buffers, which the caller
// fills from load_parameters_path.
#include <cstdint>
#include <string>

namespace torch::nn {
class Module;
}

namespace shadowgrad::checkpoint {

// Loads step `step` of run_dir/checkpoints into `model` (-1: the latest loadable one; a corrupt latest one is named in
// a warning and the one before it is used, as restore() does). model.pt is checked against the manifest (its size and
// CRC-32, the manifest's own checksum and step) and every parameter's name, shape and dtype against the model before
// any is copied, so a failure leaves the model as it was. Returns the step loaded.
// Throws InputError when the run has no checkpoint or no step-`step`; CorruptCheckpointError naming the file when the
// one asked for (or every one, for -1) is damaged or does not fit the model.
int64_t load_weights(const std::string& run_dir, int64_t step, torch::nn::Module& model);

} // namespace shadowgrad::checkpoint
