#include "train/MemoryProbe.h"

#include "config/Config.h"
#include "data/DataSource.h"
#include "memory/MemoryMeter.h"
#include "model/Decoder.h"
#include "train/Runtime.h"
#include "train/TrainStep.h"

namespace shadowgrad::train {

memory::MemoryReport memory_report(TrainStep& step, const memory::MemoryMeter& meter, int64_t steps) {
  memory::MemoryReport r =
      memory::make_report(step.model()->parameters(), step.optimizer(), step.accumulator(), meter, steps);
  r.weight_cast_cache_bytes = step.model()->weight_cache_bytes();
  return r;
}

memory::MemoryReport probe_memory(const config::Config& cfg) {
  const c10::Device device = resolve_device(cfg.hardware);
  auto source = data::make_source(cfg);
  configure_threads(cfg.num_threads);
  configure_allocator_cache(cfg.cpu_allocator_cache_mib);
  memory::MemoryMeter meter(device);
  model::Decoder model(model::DecoderOptions::from_config(cfg));
  model->to(device);
  TrainStep step(cfg, model, *source, device);
  meter.begin_step();
  step.run(0);
  meter.end_step();
  return memory_report(step, meter, 1);
}

} // namespace shadowgrad::train
