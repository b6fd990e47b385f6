// matmul_bench [--threads N] [--seconds S] [--model E,MLP,VOCAB,TOKENS,HEADS,HEAD_DIM] [--shape M,N,K[,BATCH]]...
//              [--dtypes bfloat16,float32]
// Measures this machine's matmul throughput in GF/s (2*M*N*K flops per product), in bf16 and fp32, through the
// same LibTorch ops the trainer uses (at::linear, at::matmul), at a large square size and at the model's own
// shapes. It is the "limit" row of bench/bench.sh. Cost: about 2 x (shapes) x S seconds.
// Prints one tab-separated line per measurement: name, M, N, K, batch, dtype, GF/s.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace {

constexpr const char* kUsage =
    "usage: matmul_bench [--threads N] [--seconds S] [--model E,MLP,VOCAB,TOKENS,HEADS,HEAD_DIM]\n"
    "                    [--shape M,N,K[,BATCH]]... [--dtypes bfloat16,float32] | --help\n"
    "Times at::linear / batched at::matmul in bf16 and fp32 at 2048^3 and at the model's shapes (default: the seed\n"
    "model 512,2048,32000,512,8,64); prints one tab-separated line per measurement: name, M, N, K, batch, dtype, GF/s.\n"
    "--shape (repeatable) times only the shapes given: [M,K] x [K,N] as at::linear (a weight [N,K]), or BATCH of\n"
    "them as a batched at::matmul. --dtypes picks the dtypes (default both).\n"
    "Cost: about (dtypes) x (shapes) x S seconds (S default 1).\n";

struct Shape {
  std::string name;
  int64_t m, n, k, batch;  // batch > 0: a batched matmul [batch,M,K] x [batch,K,N]; 0: at::linear
};

double gflops(const Shape& s, c10::ScalarType dtype, double min_seconds) {
  at::Tensor a, b;
  const int64_t batch = std::max<int64_t>(1, s.batch);
  if (s.batch > 0) {
    a = at::randn({s.batch, s.m, s.k}).to(dtype);
    b = at::randn({s.batch, s.k, s.n}).to(dtype);
  } else {
    a = at::randn({s.m, s.k}).to(dtype);
    b = at::randn({s.n, s.k}).to(dtype);  // a weight, as at::linear takes it
  }
  auto once = [&] { return s.batch > 0 ? at::matmul(a, b) : at::linear(a, b); };
  for (int i = 0; i < 3; ++i) once();  // warm-up: kernel selection, oneDNN primitive cache
  int64_t reps = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    once();
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < min_seconds);
  return 2.0 * double(batch) * double(s.m) * double(s.n) * double(s.k) * double(reps) / elapsed / 1e9;
}

} // namespace

int main(int argc, char** argv) {
  // Same fix as the trainer: OpenBLAS 0.3.21 mis-detects avx512_bf16 CPUs unless told the core type at load.
  if (!std::getenv("OPENBLAS_CORETYPE") && std::getenv("MATMUL_BENCH_NO_REEXEC") == nullptr) {
    FILE* f = std::fopen("/proc/cpuinfo", "r");
    char line[8192];
    bool bf16 = false;
    while (f && std::fgets(line, sizeof line, f))
      if (std::strncmp(line, "flags", 5) == 0) {
        bf16 = std::strstr(line, " avx512_bf16") != nullptr;
        break;
      }
    if (f) std::fclose(f);
    if (bf16) {
      setenv("OPENBLAS_CORETYPE", "COOPERLAKE", 1);
      execv("/proc/self/exe", argv);
    }
  }
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  double seconds = 1.0;
  int64_t emb = 512, mlp = 2048, vocab = 32000, tokens = 512, heads = 8, head_dim = 64;
  std::vector<Shape> asked;
  std::vector<c10::ScalarType> dtypes = {at::kBFloat16, at::kFloat};
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "-h" || key == "--help") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (i + 1 == argc) {  // every option takes a value; a lone one must not start a 15 s run unasked
      std::fprintf(stderr, "error: option '%s' needs a value\n%s", argv[i], kUsage);
      return 2;
    }
    if (key == "--threads") threads = std::atoi(argv[i + 1]);
    else if (key == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (key == "--model") {
      if (std::sscanf(argv[i + 1], "%ld,%ld,%ld,%ld,%ld,%ld", &emb, &mlp, &vocab, &tokens, &heads, &head_dim) != 6) {
        std::fprintf(stderr, "error: --model wants E,MLP,VOCAB,TOKENS,HEADS,HEAD_DIM, got '%s'\n", argv[i + 1]);
        return 2;
      }
    } else if (key == "--shape") {
      Shape s{"shape", 0, 0, 0, 0};
      const int got = std::sscanf(argv[i + 1], "%ld,%ld,%ld,%ld", &s.m, &s.n, &s.k, &s.batch);
      if (got < 3 || s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch < 0) {
        std::fprintf(stderr, "error: --shape wants M,N,K or M,N,K,BATCH (positive), got '%s'\n", argv[i + 1]);
        return 2;
      }
      asked.push_back(s);
    } else if (key == "--dtypes") {
      dtypes.clear();
      std::string list = argv[i + 1];
      for (size_t at = 0; at <= list.size();) {
        const size_t end = std::min(list.find(',', at), list.size());
        const std::string name = list.substr(at, end - at);
        if (name == "bfloat16") dtypes.push_back(at::kBFloat16);
        else if (name == "float32") dtypes.push_back(at::kFloat);
        else {
          std::fprintf(stderr, "error: --dtypes wants bfloat16 and/or float32, got '%s'\n", name.c_str());
          return 2;
        }
        at = end + 1;
      }
    } else {
      std::fprintf(stderr, "error: unknown option '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  at::set_num_threads(threads);
  const int64_t q = heads * head_dim;
  // Forward shapes of one microbatch of `tokens` tokens; backward runs the same sizes transposed.
  std::vector<Shape> shapes = {
      {"square 2048^3", 2048, 2048, 2048, 0},
      {"qkv/out proj", tokens, q, emb, 0},
      {"mlp up/gate", tokens, mlp, emb, 0},
      {"mlp down", tokens, emb, mlp, 0},
      {"vocab proj", tokens, vocab, emb, 0},
      {"attn scores", tokens, tokens, head_dim, heads},
      {"attn values", tokens, head_dim, tokens, heads},
  };
  if (!asked.empty()) shapes = asked;
  std::printf("# threads=%d OPENBLAS_CORETYPE=%s\n", at::get_num_threads(),
              std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "(unset)");
  for (auto dtype : dtypes)
    for (const auto& s : shapes)
      std::printf("%s\t%ld\t%ld\t%ld\t%ld\t%s\t%.1f\n", s.name.c_str(), s.m, s.n, s.k, s.batch,
                  dtype == at::kBFloat16 ? "bfloat16" : "float32", gflops(s, dtype, seconds));
  return 0;
}
