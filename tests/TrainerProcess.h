#pragma once
// Running build/trainer from tests: to completion (popen) or in the background (to send it signals),
// and reading metrics.jsonl fields as the exact strings the trainer wrote.
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace trainer_process {

struct Result {
  int code;            // exit status, or 128 + signal if killed
  std::string output;  // stdout and stderr together
};

inline int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Any shell command line, to completion.
inline Result run_command(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  return {exit_code(pclose(pipe)), out};
}

inline Result run(const std::string& args) { return run_command(std::string(TRAINER_BIN) + " " + args); }

// Starts the trainer in the background with output to `log`; the pid is the trainer's own. `env` is a list of
// NAME=value words exported to it, e.g. "RANK=1 WORLD_SIZE=2".
inline pid_t spawn(const std::string& args, const std::string& log, const std::string& env = "") {
  std::string cmd = (env.empty() ? "" : "export " + env + "; ") + "exec " + std::string(TRAINER_BIN) + " " + args +
                    " >" + log + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// True while `pid` (a child) has not exited; it is not reaped, so wait_for still gets its status.
inline bool running(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

// Waits until the file `path` holds `needle` (true), or `pid` has exited or 120 s have passed (false).
inline bool wait_for_text(const std::string& path, const std::string& needle, pid_t pid) {
  for (int i = 0; i < 120000; ++i) {
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find(needle) != std::string::npos) return true;
    if (!running(pid)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// The trainer held at `point` (SHADOWGRAD_TEST_HOLD=`point`, src/train/Signals.h): starts it like spawn and returns
// once it says it waits there, or -1 if it exited first (its log is `log`). A stop signal sent then lands at that
// point: with "step-S", the run stops after step S with a checkpoint of step S, whatever the machine's load.
inline pid_t spawn_held(const std::string& args, const std::string& log, const std::string& point,
                        const std::string& env = "") {
  const pid_t pid = spawn(args, log, "SHADOWGRAD_TEST_HOLD=" + point + (env.empty() ? "" : " " + env));
  const std::string at = point.substr(0, point.find(':'));
  return wait_for_text(log, "test hold: at " + at + ",", pid) ? pid : -1;
}

inline int wait_for(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return exit_code(status);
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The first line of `text` that contains `needle`, or "" when none does. Tests look for the line they mean: which
// lines come first depends on the host (a warning about the CPU may precede the run line).
inline std::string line_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) return line;
  return "";
}

// The raw text of `"key": value` in each line of metrics.jsonl, e.g. {"5.123456789", ...}.
inline std::vector<std::string> field(const std::string& metrics_path, const std::string& key) {
  std::vector<std::string> out;
  for (const auto& line : lines(metrics_path)) {
    const std::string tag = "\"" + key + "\": ";
    size_t at = line.find(tag);
    if (at == std::string::npos) {
      out.push_back("<missing>");
      continue;
    }
    at += tag.size();
    out.push_back(line.substr(at, line.find_first_of(",}", at) - at));
  }
  return out;
}

inline std::string fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("sg_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// A tiny model: emb 32, 2 layers, vocab 64, seq 16, one thread.
// configs/tiny.yml's keys as " key=value" overrides (one definition of the tiny model, for base.yml runs).
inline std::string yaml_as_overrides(const std::string& path) {
  std::ifstream in(path);
  std::string line, out;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    const auto value = line.find_first_not_of(' ', colon + 1);
    out += " " + line.substr(0, colon) + "=" + (value == std::string::npos ? "" : line.substr(value));
  }
  return out;
}
inline const std::string kTinyModel = yaml_as_overrides(SHADOWGRAD_SOURCE_DIR "/configs/tiny.yml");
// The same, logging every step.
inline const std::string kTiny = kTinyModel + " log_period=1";

// A tiny run `name` under `base`, with a 30-step learning-rate schedule, then `extra`.
inline std::string tiny_run_args(const std::string& base, const std::string& name, const std::string& extra) {
  return "base.yml base_output_directory=" + base + " run_name=" + name + kTiny + " learning_rate_schedule_steps=30 " +
         extra;
}

// Waits until `path` (a live run's metrics.jsonl) has at least `n` lines, or 120 s pass.
inline void wait_for_lines(const std::string& path, size_t n) {
  for (int i = 0; i < 24000 && lines(path).size() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

} // namespace trainer_process
