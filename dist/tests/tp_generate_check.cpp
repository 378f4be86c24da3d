// MPI check of tensor-parallel generation, run by ctest as `mpirun -np P attnkit_tp_check`:
// for H = 8 and Hkv in {8, 4, 2, 1} (so Hkv >= P and Hkv < P for P = 2 and 4), with and without
// gates and sinks, P ranks generate greedily and rank 0 compares every step's tokens and logits
// with one process running the whole model; every rank's KV-cache bytes must equal
// kv_plan(--tp P).shard_bytes_per_sequence. Exit code 0 on success, 1 on any mismatch.
// `attnkit_tp_check --save DIR HKV` (no MPI) writes the Hkv model for the CLI check instead.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/dist/mpi.hpp"
#include "attnkit/dist/tp_generate.hpp"
#include "attnkit/kv/kv_plan.hpp"

namespace attnkit {
namespace {

GptModel test_model(int64_t kv_heads, GateMode gate, SinkLogits sink) {
  GptConfig c;
  c.vocab_size = 261, c.hidden_size = 32, c.intermediate_size = 50, c.num_hidden_layers = 2;
  c.num_attention_heads = 8, c.num_key_value_heads = kv_heads, c.head_dim = 4;
  c.max_position_embeddings = 64, c.gate = gate, c.sink_logits = sink;
  GptModel m(c);
  m.init_random(11);
  for (auto& x : m.parameters()) x = x * 20.0f + 0.05f;  // spread logits: no near-ties in greedy
  return m;
}

// Feeds `tokens` to the generator, then samples and feeds `steps` more (appended to tokens);
// returns every step's logits [tokens.size() + steps][V].
template <class Generator>
std::vector<std::vector<float>> greedy_run(Generator& g, std::vector<int32_t>& tokens,
                                           int64_t steps) {
  std::vector<std::vector<float>> logits;
  std::span<const float> l;
  for (const int32_t t : tokens) {
    l = g.feed(t);
    logits.emplace_back(l.begin(), l.end());
  }
  for (int64_t s = 0; s < steps; ++s) {
    tokens.push_back(g.sample(l));
    l = g.feed(tokens.back());
    logits.emplace_back(l.begin(), l.end());
  }
  return logits;
}

// Returns the number of failures on this rank (printed by rank 0 for the comparisons).
int check_one(const GptModel& model, int rank, int ranks) {
  const auto& c = model.config();
  const int64_t steps = 24;
  const GenerateOptions o{.capacity = 40, .temperature = 0};
  std::vector<int32_t> tokens{1, 7, 3};
  std::vector<std::vector<float>> ref;
  if (rank == 0) {  // one process, whole model
    GptGenerator whole(model, o);
    ref = greedy_run(whole, tokens, steps);
  }
  dist::TpGenerator tp(model, o, rank, ranks);
  std::vector<int32_t> got{1, 7, 3};
  const std::vector<std::vector<float>> logits = greedy_run(tp, got, steps);
  int failures = 0;
  const KVPlanRow plan = kv_plan({.layers = c.num_hidden_layers, .heads = c.num_attention_heads,
                                  .kv_heads = c.num_key_value_heads, .head_dim = c.head_dim,
                                  .dtype = KVDType::f32},
                                 {.context = 40, .tp = ranks});
  if (tp.cache().nbytes() != plan.shard_bytes_per_sequence) {
    std::fprintf(stderr, "rank %d Hkv %lld: KV cache %lld bytes, kv-plan predicts %lld\n", rank,
                 (long long)c.num_key_value_heads, (long long)tp.cache().nbytes(),
                 (long long)plan.shard_bytes_per_sequence);
    ++failures;
  }
  if (rank == 0) {
    double worst = 0, scale = 0;
    for (size_t s = 0; s < ref.size(); ++s)
      for (size_t v = 0; v < ref[s].size(); ++v) {
        worst = std::max(worst, std::abs(double(logits[s][v]) - ref[s][v]));
        scale = std::max(scale, std::abs(double(ref[s][v])));
      }
    // Same float32 arithmetic with the o_proj / down_proj sums regrouped by rank: rounding only.
    const bool same_tokens = got == tokens, close = worst <= 1e-5 * std::max(1.0, scale);
    std::printf("P=%d H=%lld Hkv=%lld gate=%d sink=%d: tokens %s, max |logit diff| %.3g (scale %.3g), "
                "KV bytes per rank %lld (kv-plan %lld)\n",
                ranks, (long long)c.num_attention_heads, (long long)c.num_key_value_heads, int(c.gate),
                int(c.sink_logits), same_tokens ? "equal" : "DIFFER", worst, scale, (long long)tp.cache().nbytes(),
                (long long)plan.shard_bytes_per_sequence);
    failures += !same_tokens + !close;
  }
  return failures;
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  using namespace attnkit;
  try {
    if (argc == 4 && std::strcmp(argv[1], "--save") == 0) {
      test_model(std::stoll(argv[3]), GateMode::kNone, SinkLogits::kNone).save(argv[2]);
      return 0;
    }
    dist::MpiWorld world;
    ThreadCountScope one(1);
    int failures = 0;
    for (int64_t hkv : {8, 4, 2, 1}) failures += check_one(test_model(hkv, GateMode::kNone, SinkLogits::kNone), world.rank(), world.size());
    failures += check_one(test_model(2, GateMode::kHeadwise, SinkLogits::kLearned), world.rank(), world.size());
    failures += check_one(test_model(4, GateMode::kElementwise, SinkLogits::kOffByOne), world.rank(), world.size());
    const int64_t total = int64_t(dist::all_reduce_sum(double(failures)));
    if (world.rank() == 0) std::printf("%s\n", total == 0 ? "tp check: all passed" : "tp check: FAILED");
    return total == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnkit_tp_check: error: %s\n", e.what());
    return 2;
  }
}
