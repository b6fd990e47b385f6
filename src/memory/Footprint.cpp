#include "memory/Footprint.h"

#include <algorithm>

#include <fmt/format.h>

#include "memory/BatchFit.h"

namespace shadowgrad::memory {

std::string gib(int64_t bytes) {
  return bytes >= (int64_t(1) << 30) ? fmt::format("{:.2f} GiB", double(bytes) / double(int64_t(1) << 30))
                                     : mib(bytes);
}

std::string describe(const Footprint& f) {
  std::string parts = "weights " + gib(f.weights);
  auto add = [&parts](const char* name, int64_t bytes) {
    if (bytes > 0) parts += fmt::format(" + {} {}", name, gib(bytes));
  };
  add("shadow tree", f.shadow_tree);
  add("optimizer state", f.optimizer_state);
  add("hoisted weight casts", f.weight_casts);
  add("activations (a lower bound)", f.activations);
  if (f.whole_at_start > 0 && f.whole_at_start == f.total())
    return parts + fmt::format("; the whole weights ({}) held once at the start = at least {}", gib(f.whole_at_start),
                               gib(f.total()));
  return parts + " = at least " + gib(f.total());
}

std::string does_not_fit_before_build(const Footprint& f, const std::string& what, int64_t available,
                                      const std::string& available_source,
                                      const std::vector<FootprintAlternative>& tried) {
  std::string fits;
  for (const auto& t : tried)
    if (t.total <= available)
      fits += fmt::format("{}{} (at least {})", fits.empty() ? "" : "; ", t.overrides, gib(t.total));
  std::string advice;
  if (!fits.empty()) {
    advice = "These would fit by the same estimate: " + fits + ".";
  } else if (!tried.empty()) {
    const auto least = std::min_element(tried.begin(), tried.end(),
                                        [](const auto& a, const auto& b) { return a.total < b.total; });
    advice = fmt::format("None of the lean settings fits either: the smallest, {}, needs at least {}.",
                         least->overrides, gib(least->total));
  }
  return fmt::format("the model does not fit, found before allocating it: {} needs {}, more than this process may "
                     "take, {} ({}). {} (docs/memory.md, docs/lora.md)",
                     what, describe(f), gib(available), available_source, advice);
}

} // namespace shadowgrad::memory
