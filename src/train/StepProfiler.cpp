#include "train/StepProfiler.h"

#include <algorithm>
#include <iomanip>
#include <limits>
#include <sstream>
#include <unordered_map>

#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include "util/File.h"

namespace shadowgrad::train {

namespace {

namespace prof = torch::autograd::profiler;

void json_string(std::ostream& out, const char* s) {
  out << '"';
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') out << '\\';
    if (static_cast<unsigned char>(*s) >= 0x20) out << *s;
  }
  out << '"';
}

// One complete ("X") event per op, paired push/pop by handle within a thread's list, as RecordProfile writes them,
// plus the op's input shapes (an input that is not a tensor shows as []). Times in microseconds from the first event,
// to the nanosecond.
std::string chrome_trace(const prof::thread_event_lists& lists) {
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& events : lists)
    for (const auto& e : events)
      if (e.kind() == prof::EventKind::PushRange) origin = std::min(origin, e.cpuUs());
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << "[\n";
  bool first = true;
  for (const auto& events : lists) {
    std::unordered_map<at::RecordFunctionHandle, const prof::LegacyEvent*> open;
    for (const auto& e : events) {
      if (e.kind() == prof::EventKind::PushRange) {
        open[e.handle()] = &e;
      } else if (e.kind() == prof::EventKind::PopRange) {
        auto it = open.find(e.handle());
        if (it == open.end()) continue;
        const prof::LegacyEvent& start = *it->second;
        open.erase(it);
        out << (first ? "" : ",\n") << "{\"name\": ";
        first = false;
        json_string(out, start.name());
        out << ", \"ph\": \"X\", \"ts\": " << start.cpuUs() - origin << ", \"dur\": " << start.cpuElapsedUs(e)
            << ", \"tid\": " << start.threadId() << ", \"pid\": \"CPU Functions\", \"args\": {\"shapes\": [";
        const auto shapes = start.shapes();
        for (size_t i = 0; i < shapes.size(); ++i) {
          out << (i ? ", [" : "[");
          for (size_t j = 0; j < shapes[i].size(); ++j) out << (j ? ", " : "") << shapes[i][j];
          out << ']';
        }
        out << "]}}";
      }
    }
  }
  out << "\n]\n";
  return out.str();
}

} // namespace

StepProfiler::StepProfiler(std::string path, int64_t first, int64_t count)
    : path_(std::move(path)), first_(first), count_(count) {}

StepProfiler::~StepProfiler() {
  if (recording_) prof::disableProfilerLegacy();  // a run that stopped inside the window: nothing is written
}

void StepProfiler::before_step(int64_t step) {
  if (count_ > 0 && step == first_ && !recording_) {
    spdlog::info("profiling steps {}..{} into {}", first_ + 1, first_ + count_, path_);
    prof::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU,
                                                                     /*report_input_shapes=*/true));
    recording_ = true;
  }
}

void StepProfiler::after_step(int64_t step) {
  if (recording_ && step + 1 == first_ + count_) finish();
}

void StepProfiler::finish() {
  recording_ = false;
  util::write_file_atomically(path_, chrome_trace(prof::disableProfilerLegacy()));
}

} // namespace shadowgrad::train
