#pragma once
// Renders <run_dir>/loss.png from metrics.jsonl with gnuplot when gnuplot is installed. Never fails the
// run: a missing gnuplot or a plotting error only produces a debug log line.
#include <string>

namespace shadowgrad::train {

// Returns true when loss.png was written.
bool plot_loss_if_possible(const std::string& run_dir);

} // namespace shadowgrad::train
