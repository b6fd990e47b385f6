#include "train/StepProfiler.h"

#include <algorithm>
#include <iomanip>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <ATen/record_function.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include "util/File.h"

namespace shadowgrad::train {

// What each op of the window read and wrote, filled by a RecordFunction callback beside the legacy profiler's and
// joined to its events by handle.
struct OpsMoved {
  struct Op {
    std::vector<c10::ScalarType> in, out;
    int64_t in_bytes = 0, out_bytes = 0;
  };
  std::unordered_map<at::RecordFunctionHandle, Op> ops;
  at::CallbackHandle callback = 0;
};

namespace {

namespace prof = torch::autograd::profiler;

// The recording window's table (one window at a time), read by the RecordFunction callbacks.
std::mutex g_recording_mutex;
OpsMoved* g_recording = nullptr;

void stop_recording_moved(OpsMoved& moved) {
  at::removeCallback(moved.callback);
  std::lock_guard<std::mutex> lock(g_recording_mutex);
  g_recording = nullptr;
}

// Tensor arguments' dtypes and bytes (elements times element size; a list of tensors counts each).
void tally_tensors(const c10::IValue& v, std::vector<c10::ScalarType>& dtypes, int64_t& bytes) {
  auto one = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    dtypes.push_back(t.scalar_type());
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
  };
  if (v.isTensor()) {
    one(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) one(t);
  }
}

const char* dtype_short_name(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return "f32";
    case c10::kBFloat16: return "bf16";
    case c10::kHalf: return "f16";
    case c10::kDouble: return "f64";
    case c10::kLong: return "i64";
    case c10::kInt: return "i32";
    case c10::kBool: return "bool";
    default: return c10::toString(t);
  }
}

void json_dtypes(std::ostream& out, const std::vector<c10::ScalarType>& dtypes) {
  out << '[';
  for (size_t i = 0; i < dtypes.size(); ++i) out << (i ? ", \"" : "\"") << dtype_short_name(dtypes[i]) << '"';
  out << ']';
}

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
std::string chrome_trace(const prof::thread_event_lists& lists, const OpsMoved& moved) {
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
        out << ']';
        if (const auto op = moved.ops.find(start.handle()); op != moved.ops.end()) {
          out << ", \"in\": ";
          json_dtypes(out, op->second.in);
          out << ", \"out\": ";
          json_dtypes(out, op->second.out);
          out << ", \"bytes\": [" << op->second.in_bytes << ", " << op->second.out_bytes << ']';
        }
        out << "}}";
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
  if (!recording_) return;
  prof::disableProfilerLegacy();  // a run that stopped inside the window: nothing is written
  stop_recording_moved(*moved_);
}

void StepProfiler::before_step(int64_t step) {
  if (count_ > 0 && step == first_ && !recording_) {
    spdlog::info("profiling steps {}..{} into {}", first_ + 1, first_ + count_, path_);
    moved_ = std::make_shared<OpsMoved>();
    {
      std::lock_guard<std::mutex> lock(g_recording_mutex);
      g_recording = moved_.get();
    }
    // Every thread's ops (autograd's engine included), with the handles the legacy profiler's events carry. The
    // callbacks are plain functions: they find the window's table through g_recording.
    moved_->callback = at::addGlobalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              OpsMoved::Op op;
              for (const auto& v : fn.inputs()) tally_tensors(v, op.in, op.in_bytes);
              std::lock_guard<std::mutex> lock(g_recording_mutex);
              if (g_recording) g_recording->ops[fn.handle()] = std::move(op);
              return nullptr;
            },
            [](const at::RecordFunction& fn, at::ObserverContext*) {
              std::vector<c10::ScalarType> out;
              int64_t bytes = 0;
              for (const auto& v : fn.outputs()) tally_tensors(v, out, bytes);
              std::lock_guard<std::mutex> lock(g_recording_mutex);
              if (!g_recording) return;
              auto& op = g_recording->ops[fn.handle()];
              op.out = std::move(out);
              op.out_bytes = bytes;
            })
            .needsInputs(true)
            .needsOutputs(true)
            .needsIds(true));
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
  const auto lists = prof::disableProfilerLegacy();
  stop_recording_moved(*moved_);
  util::write_file_atomically(path_, chrome_trace(lists, *moved_));
  moved_.reset();
}

} // namespace shadowgrad::train
