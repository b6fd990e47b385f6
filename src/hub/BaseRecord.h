#pragma once
// The base a LoRA run was built on, recorded at its start and checked when it resumes (docs/lora.md, "Adapters in
// and out"). A LoRA checkpoint holds only the adapters, so a resume reads the frozen base again from
// load_parameters_path: adapters trained on one base and resumed on another would train on without a word.
//
//   carry_model_files(model_dir, run_dir);   // run_dir/hf/source.json: the directory, its weight files and sizes
//   write_base_record(model_dir, run_dir);   // adds each file's fingerprints to it
//   ...
//   verify_base_record(model_dir, run_dir);  // on resume, before the base is read: ModelFileError naming the file
//   (hub/ModelWeights.h reads a run's base again: run_base_dir, verify_base_record, then the weights)
#include <string>

namespace shadowgrad::hub {

// Adds to run_dir/hf/source.json, for each weight file it lists: the file's size, the FNV-1a 64 of its safetensors
// header (the length field and the JSON: tensor names, dtypes, shapes, offsets, metadata) and of its data section's
// first and last MiB; and the FNV-1a 64 of model.safetensors.index.json when the directory has one. Reads about
// 2 MiB per file. Requires source.json (carry_model_files writes it); throws ModelFileError for a weight file that is
// not safetensors.
void write_base_record(const std::string& model_dir, const std::string& run_dir);

// Checks model_dir's weight files against run_dir's record. Throws ModelFileError naming the file when a recorded file
// is gone or has another size, header or sampled data, or when the index appeared, went or changed. Returns false,
// checking nothing, when the run has no record (a run that did not start from a model directory). A change that keeps
// the size, the header and the data's first and last MiB is not seen.
bool verify_base_record(const std::string& model_dir, const std::string& run_dir);

// The directory a run's base is read from again (a resume, a merged export, generate): the absolute path run_dir's
// hf/source.json recorded while it is a directory, so that a run started with a relative load_parameters_path works
// from any directory; else `given` (a base moved since, which verify_base_record then checks against the record).
// `given` when the run recorded none. Throws ModelFileError naming both when neither is a directory.
std::string run_base_dir(const std::string& given, const std::string& run_dir);

// The model directory run_dir/hf/source.json names (an absolute path); "" when the run has none (from scratch).
std::string recorded_base_dir(const std::string& run_dir);

} // namespace shadowgrad::hub
