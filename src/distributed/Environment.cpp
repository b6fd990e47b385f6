#include "distributed/Environment.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::distributed {

namespace {

const char* get(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int parse_int(const char* name, const char* value, long min, long max) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || v < min || v > max)
    throw InputError(fmt::format("environment variable {}='{}' must be an integer in [{}, {}]", name, value, min, max));
  return static_cast<int>(v);
}

} // namespace

ProcessEnvironment ProcessEnvironment::from_environment() {
  ProcessEnvironment env;
  if (const char* w = get("WORLD_SIZE")) env.world_size = parse_int("WORLD_SIZE", w, 1, 1 << 20);
  if (const char* r = get("RANK")) env.rank = parse_int("RANK", r, 0, env.world_size - 1);
  if (const char* l = get("LOCAL_RANK")) env.local_rank = parse_int("LOCAL_RANK", l, 0, 1 << 20);
  if (const char* l = get("LOCAL_WORLD_SIZE")) env.local_world_size = parse_int("LOCAL_WORLD_SIZE", l, 1, 1 << 20);
  if (!env.distributed()) return env;

  for (const char* required : {"RANK", "MASTER_ADDR", "MASTER_PORT"})
    if (!get(required))
      throw InputError(fmt::format("WORLD_SIZE={} but {} is not set; set RANK, MASTER_ADDR and MASTER_PORT for every "
                                   "process, or use scripts/launch.sh",
                                   env.world_size, required));
  env.master_addr = get("MASTER_ADDR");
  env.master_port = parse_int("MASTER_PORT", get("MASTER_PORT"), 1, 65535);
  if (const char* a = get("TORCHELASTIC_USE_AGENT_STORE")) env.agent_store = std::string(a) == "True";
  if (const char* c = get("TORCHELASTIC_RESTART_COUNT"))
    env.restart_count = parse_int("TORCHELASTIC_RESTART_COUNT", c, 0, 1 << 20);
  return env;
}

} // namespace shadowgrad::distributed
