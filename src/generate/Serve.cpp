#include "generate/Serve.h"

#include <istream>
#include <ostream>
#include <string>

#include <fmt/format.h>

#include "util/Errors.h"

namespace shadowgrad::generate {

namespace {

template <class T>
T get(const nlohmann::json& request, const char* key, T fallback) {
  if (!request.contains(key)) return fallback;
  try {
    return request.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("request key \"{}\" has the wrong type: {}", key, request.at(key).dump()));
  }
}

void send(std::ostream& out, const nlohmann::json& message) { out << message.dump() << "\n" << std::flush; }

} // namespace

GenerateOptions request_options(const nlohmann::json& request) {
  for (const auto& [key, value] : request.items())
    if (key != "ids" && key != "max_new" && key != "stop" && key != "temperature" && key != "top_k" &&
        key != "top_p" && key != "seed" && key != "stream" && key != "reuse_cache")
      throw InputError(fmt::format("unknown request key \"{}\"", key));
  GenerateOptions o;
  o.max_new = get<int64_t>(request, "max_new", o.max_new);
  o.stop_ids = get<std::vector<int64_t>>(request, "stop", {});
  o.sampling.temperature = get<double>(request, "temperature", 0);
  o.sampling.top_k = get<int64_t>(request, "top_k", 0);
  o.sampling.top_p = get<double>(request, "top_p", 1);
  o.sampling.seed = get<uint64_t>(request, "seed", 0);
  o.reuse_cache = get<bool>(request, "reuse_cache", true);
  o.sampling.validate();
  return o;
}

void serve(Generator& generator, std::istream& in, std::ostream& out) {
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const auto request = nlohmann::json::parse(line);
      if (!request.is_object() || !request.contains("ids")) throw InputError("a request is an object with \"ids\"");
      const auto ids = get<std::vector<int64_t>>(request, "ids", {});
      const auto options = request_options(request);
      std::function<bool(int64_t)> on_token;
      if (get<bool>(request, "stream", false))
        on_token = [&out](int64_t token) {
          send(out, {{"token", token}});
          return true;
        };
      const auto g = generator.run(ids, options, on_token);
      send(out, {{"ids", g.tokens},
                 {"finish", finish_name(g.finish)},
                 {"prompt_tokens", g.prompt_tokens},
                 {"reused_tokens", g.reused_tokens},
                 {"first_token_s", g.first_token_s},
                 {"decode_s", g.decode_s}});
    } catch (const nlohmann::json::parse_error& e) {
      send(out, {{"error", fmt::format("a request is one JSON object per line: {}", e.what())}, {"code", 2}});
    } catch (const InputError& e) {
      send(out, {{"error", e.what()}, {"code", 2}});
    } catch (const std::exception& e) {
      send(out, {{"error", e.what()}, {"code", 1}});
    }
  }
}

} // namespace shadowgrad::generate
