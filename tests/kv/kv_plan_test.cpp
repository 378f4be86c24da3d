// KV-cache planner: the literature's llama3-70b figures, int8 scales, tensor-parallel sharding,
// errors that name the field, and the `attnkit kv-plan` command end to end.
#include "attnkit/kv/kv_plan.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

const KVShape kLlama70b{80, 64, 8, 128, KVDType::f16};
const KVPlanOptions kLlama70bOpts{.context = 32768};

// Expects kv_plan(shape, opts) to throw one line that names `field`.
void expect_plan_error_names(const KVShape& shape, const KVPlanOptions& opts, const char* field) {
  const std::string msg = error_of([&] { kv_plan(shape, opts); });
  EXPECT_NE(msg.find(field), std::string::npos) << field << ": " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(KVPlan, Llama70bMatchesPublishedFigures) {
  const KVPlanVariants v = kv_plan_variants(kLlama70b, kLlama70bOpts);
  // 2·80·Hkv·128·2 bytes: 2.5 MiB, 320 KiB, 40 KiB.
  EXPECT_EQ(v.mha.bytes_per_token, 2621440);
  EXPECT_EQ(v.given.bytes_per_token, 327680);
  EXPECT_EQ(v.mqa.bytes_per_token, 40960);
  EXPECT_EQ(v.mha.kv_heads, 64);
  EXPECT_EQ(v.given.kv_heads, 8);
  EXPECT_EQ(v.mqa.kv_heads, 1);
  // × 32768 tokens: 85.9, 10.7, 1.34 GB.
  EXPECT_EQ(v.mha.bytes_per_sequence, 85899345920);
  EXPECT_EQ(v.given.bytes_per_sequence, 10737418240);
  EXPECT_EQ(v.mqa.bytes_per_sequence, 1342177280);
  EXPECT_EQ(v.given.bytes_batch, v.given.bytes_per_sequence);
  EXPECT_EQ(v.given.scale_bytes_per_token, 0);
  // / 3.35e12 B/s: 25.6 ms and 3.2 ms per decoded token.
  EXPECT_NEAR(v.mha.read_seconds, 25.6e-3, 0.01 * 25.6e-3);
  EXPECT_NEAR(v.given.read_seconds, 3.2e-3, 0.01 * 3.2e-3);
  EXPECT_DOUBLE_EQ(v.mqa.read_seconds, 1342177280 / 3.35e12);
  // 80e9 B budget: 0 MHA sequences, 7 GQA, 59 MQA.
  EXPECT_EQ(v.mha.sequences_in_budget, 0);
  EXPECT_EQ(v.given.sequences_in_budget, 7);
  EXPECT_EQ(v.mqa.sequences_in_budget, 59);
  EXPECT_EQ(v.given.kv_heads_per_shard, 8);
  EXPECT_EQ(v.given.replication, 1);
  EXPECT_EQ(v.given.total_bytes_batch, v.given.bytes_batch);
}

TEST(KVPlan, PresetsHaveThePublicShapes) {
  const auto p = kv_preset("llama3-70b");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->shape.layers, 80);
  EXPECT_EQ(p->shape.heads, 64);
  EXPECT_EQ(p->shape.kv_heads, 8);
  EXPECT_EQ(p->shape.head_dim, 128);
  EXPECT_EQ(p->shape.dtype, KVDType::f16);
  EXPECT_EQ(p->context, 32768);
  const auto g = kv_preset("gpt-oss-120b");
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(kv_bytes_per_token(g->shape), 2 * 36 * 8 * 64 * 2);
  EXPECT_EQ(g->context, 131072);
  const auto m = kv_preset("mistral-7b");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(kv_bytes_per_token(m->shape), 2 * 32 * 8 * 128 * 2);
  EXPECT_EQ(m->context, 32768);
  const auto l8 = kv_preset("llama3-8b");
  ASSERT_TRUE(l8.has_value());
  EXPECT_EQ(kv_bytes_per_token(l8->shape), 131072);
  EXPECT_FALSE(kv_preset("llama3-71b").has_value());
  EXPECT_EQ(kv_preset_names().size(), kv_presets().size());
}

TEST(KVPlan, DTypeBytes) {
  KVShape s = kLlama70b;
  const std::pair<KVDType, int64_t> cases[] = {
      {KVDType::f32, 4}, {KVDType::f16, 2}, {KVDType::bf16, 2}, {KVDType::fp8, 1}};
  for (auto [t, b] : cases) {
    s.dtype = t;
    EXPECT_EQ(kv_bytes_per_token(s), 2 * 80 * 8 * 128 * b) << kv_dtype_name(t);
    EXPECT_EQ(kv_plan(s, kLlama70bOpts).scale_bytes_per_token, 0) << kv_dtype_name(t);
    EXPECT_EQ(parse_kv_dtype(kv_dtype_name(t)), t);
  }
  EXPECT_FALSE(parse_kv_dtype("int4").has_value());
}

TEST(KVPlan, Int8CountsFloat32ScalesPerTokenPerHead) {
  KVShape s = kLlama70b;
  s.dtype = KVDType::int8;
  const int64_t data = 2 * 80 * 8 * 128;   // 1 byte per element
  const int64_t scales = 2 * 80 * 8 * 4;   // one float32 per token per KV head, K and V
  const KVPlanRow r = kv_plan(s, kLlama70bOpts);
  EXPECT_EQ(kv_bytes_per_token(s), data + scales);
  EXPECT_EQ(r.bytes_per_token, 168960);
  EXPECT_EQ(r.scale_bytes_per_token, scales);
  EXPECT_EQ(r.bytes_per_sequence, (data + scales) * 32768);
  // Sharded int8 keeps each shard's heads' scales.
  const KVPlanRow sharded = kv_plan(s, {.context = 32768, .tp = 4});
  EXPECT_EQ(sharded.shard_bytes_per_token, (data + scales) / 4);
}

TEST(KVPlan, BatchMultipliesAndBudgetDivides) {
  const KVPlanRow r = kv_plan(kLlama70b, {.context = 4096, .batch = 13, .memory = 10'000'000'000});
  EXPECT_EQ(r.bytes_per_sequence, 327680LL * 4096);
  EXPECT_EQ(r.bytes_batch, 327680LL * 4096 * 13);
  EXPECT_EQ(r.sequences_in_budget, 10'000'000'000 / (327680LL * 4096));   // 7
  EXPECT_DOUBLE_EQ(r.read_seconds, double(327680LL * 4096 * 13) / kDefaultKVBandwidth);
}

TEST(KVPlan, TensorParallelSplitsKVHeadsEvenly) {
  const KVPlanRow r = kv_plan(kLlama70b, {.context = 32768, .tp = 2});
  EXPECT_EQ(r.kv_heads_per_shard, 4);
  EXPECT_EQ(r.replication, 1);
  EXPECT_EQ(r.shard_bytes_per_token, 327680 / 2);
  EXPECT_EQ(r.shard_bytes_per_sequence, 10737418240 / 2);
  EXPECT_EQ(r.total_bytes_batch, 10737418240);
  EXPECT_EQ(r.sequences_in_budget, 80'000'000'000 / (10737418240 / 2));   // 14 per device
  EXPECT_DOUBLE_EQ(r.read_seconds, (10737418240 / 2) / kDefaultKVBandwidth);
}

TEST(KVPlan, TensorParallelReplicatesKVHeadsBeyondHkv) {
  const KVPlanVariants v = kv_plan_variants(kLlama70b, {.context = 32768, .tp = 16});
  EXPECT_EQ(v.given.kv_heads_per_shard, 1);
  EXPECT_EQ(v.given.replication, 2);
  EXPECT_EQ(v.given.shard_bytes_per_token, 327680 / 8);
  EXPECT_EQ(v.given.total_bytes_batch, 2 * 10737418240);
  EXPECT_EQ(v.mha.kv_heads_per_shard, 4);
  EXPECT_EQ(v.mha.replication, 1);
  EXPECT_EQ(v.mqa.kv_heads_per_shard, 1);
  EXPECT_EQ(v.mqa.replication, 16);
  EXPECT_EQ(v.mqa.total_bytes_batch, 16 * 1342177280LL);
}

TEST(KVPlan, TensorParallelRejectsUnevenSplits) {
  EXPECT_NE(error_of([] { kv_plan(kLlama70b, {.context = 1, .tp = 3}); }).find("tp (3)"), std::string::npos);
  EXPECT_NE(error_of([] { kv_plan(kLlama70b, {.context = 1, .tp = 3}); }).find("kv_heads (8)"),
            std::string::npos);
  // Hkv = 8 < P = 12: 12 is not a multiple of 8.
  KVShape s{4, 24, 8, 16, KVDType::f16};
  EXPECT_NE(error_of([&] { kv_plan(s, {.context = 1, .tp = 12}); }).find("multiple of kv_heads"),
            std::string::npos);
  // Query heads must split too: H = 64 over 128 shards.
  EXPECT_NE(error_of([] { kv_plan(kLlama70b, {.context = 1, .tp = 128}); }).find("heads (64)"),
            std::string::npos);
}

TEST(KVPlan, ImpossibleShapesNameTheField) {
  const std::pair<KVShape, const char*> cases[] = {
      {{0, 64, 8, 128, KVDType::f16}, "layers"},
      {{-3, 64, 8, 128, KVDType::f16}, "layers"},
      {{80, 0, 8, 128, KVDType::f16}, "heads"},
      {{80, 64, 0, 128, KVDType::f16}, "kv_heads"},
      {{80, 64, -8, 128, KVDType::f16}, "kv_heads"},
      {{80, 64, 8, 0, KVDType::f16}, "head_dim"},
      {{80, 6, 4, 128, KVDType::f16}, "kv_heads (4)"},
      {{80, 8, 16, 128, KVDType::f16}, "kv_heads (16)"},
      {{80, 64, 8, 128, KVDType(42)}, "dtype"},
  };
  for (const auto& [shape, field] : cases) expect_plan_error_names(shape, kLlama70bOpts, field);
  EXPECT_NE(error_of([] { kv_bytes_per_token({80, 64, 0, 128, KVDType::f16}); }).find("kv_heads"),
            std::string::npos);
}

TEST(KVPlan, ImpossibleOptionsNameTheField) {
  const std::pair<KVPlanOptions, const char*> cases[] = {
      {{.context = 0}, "context"},
      {{.context = -1}, "context"},
      {{.context = 8, .batch = 0}, "batch"},
      {{.context = 8, .tp = 0}, "tp"},
      {{.context = 8, .bandwidth = 0}, "bandwidth"},
      {{.context = 8, .bandwidth = -1e12}, "bandwidth"},
      {{.context = 8, .bandwidth = std::nan("")}, "bandwidth"},
      {{.context = 8, .memory = 0}, "memory"},
  };
  for (const auto& [opts, field] : cases) expect_plan_error_names(kLlama70b, opts, field);
}

TEST(KVPlan, OverflowThrowsInsteadOfWrapping) {
  // 2·L·Hkv·D·b > 2^63.
  const KVShape huge{int64_t(1) << 40, 1 << 20, 1 << 20, 128, KVDType::f16};
  EXPECT_NE(error_of([&] { kv_bytes_per_token(huge); }).find("bytes per token"), std::string::npos);
  // Fits per token (327680 B), not per sequence: the message names context.
  EXPECT_NE(error_of([] { kv_plan(kLlama70b, {.context = int64_t(1) << 50}); }).find("context"),
            std::string::npos);
  EXPECT_NE(error_of([] { kv_plan(kLlama70b, {.context = 1 << 30, .batch = int64_t(1) << 30}); }).find("batch"),
            std::string::npos);
  EXPECT_NE(error_of([] { kv_plan({1, 1, 1, 1, KVDType::f16}, {.context = LLONG_MAX / 4 + 1}); }).find("context"),
            std::string::npos);
  // 4 bytes per token × 2^61 tokens = 2^63 overflows; one token fewer is the largest that fits.
  EXPECT_EQ(kv_plan({1, 1, 1, 1, KVDType::f16}, {.context = (int64_t(1) << 61) - 1}).bytes_per_sequence,
            4 * ((int64_t(1) << 61) - 1));
}

TEST(KVPlan, ResolveLetsExplicitValuesOverrideThePreset) {
  KVPlanRequest req;
  req.preset = "llama3-70b";
  req.kv_heads = 64;
  req.context = 8192;
  const KVPlanInputs in = resolve(req);
  EXPECT_EQ(in.shape.layers, 80);
  EXPECT_EQ(in.shape.kv_heads, 64);
  EXPECT_EQ(in.options.context, 8192);
  EXPECT_EQ(in.options.memory, kDefaultKVMemory);

  KVPlanRequest bare;   // no preset: kv_heads defaults to heads, context is required
  bare.layers = 2, bare.heads = 4, bare.head_dim = 8;
  EXPECT_NE(error_of([&] { resolve(bare); }).find("context"), std::string::npos);
  bare.context = 10;
  EXPECT_EQ(resolve(bare).shape.kv_heads, 4);
  bare.layers.reset();
  EXPECT_NE(error_of([&] { resolve(bare); }).find("layers"), std::string::npos);
  req.preset = "gpt-5";
  EXPECT_NE(error_of([&] { resolve(req); }).find("llama3-70b"), std::string::npos);
}

// ---- the `attnkit kv-plan` command ----

struct RunResult {
  int status = -1;
  std::string out, err;
};

RunResult run_cli(const std::string& args) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(::getpid());
  const auto out = dir / ("attnkit_kv_plan_" + tag + ".out"), err = dir / ("attnkit_kv_plan_" + tag + ".err");
  const std::string cmd = std::string("'") + ATTNKIT_CLI_PATH + "' " + args + " >'" + out.string() +
                          "' 2>'" + err.string() + "'";
  RunResult r;
  const int raw = std::system(cmd.c_str());
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  r.out = slurp(out);
  r.err = slurp(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

#define SKIP_WITHOUT_CLI()                                           \
  if (std::string(ATTNKIT_CLI_PATH).empty()) GTEST_SKIP() << "CLI not built"

TEST(KVPlanCli, JsonHasExactIntegers) {
  SKIP_WITHOUT_CLI();
  const RunResult r = run_cli("kv-plan --preset llama3-70b --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("preset"), "llama3-70b");
  EXPECT_EQ(j.at("layers").get<int64_t>(), 80);
  EXPECT_EQ(j.at("kv_heads").get<int64_t>(), 8);
  EXPECT_EQ(j.at("dtype"), "f16");
  EXPECT_EQ(j.at("context").get<int64_t>(), 32768);
  EXPECT_EQ(j.at("memory").get<int64_t>(), 80'000'000'000);
  EXPECT_EQ(j.at("bytes_per_token").get<int64_t>(), 327680);
  EXPECT_EQ(j.at("bytes_per_sequence").get<int64_t>(), 10737418240);
  EXPECT_EQ(j.at("sequences_in_budget").get<int64_t>(), 7);
  EXPECT_EQ(j.at("mha").at("bytes_per_token").get<int64_t>(), 2621440);
  EXPECT_EQ(j.at("mha").at("bytes_per_sequence").get<int64_t>(), 85899345920);
  EXPECT_EQ(j.at("mqa").at("bytes_per_token").get<int64_t>(), 40960);
  EXPECT_EQ(j.at("mqa").at("bytes_per_sequence").get<int64_t>(), 1342177280);
  EXPECT_NEAR(j.at("mha").at("read_seconds").get<double>(), 25.6e-3, 0.01 * 25.6e-3);
  EXPECT_NEAR(j.at("read_seconds").get<double>(), 3.2e-3, 0.01 * 3.2e-3);
  EXPECT_TRUE(j.at("bytes_per_token").is_number_integer());
}

TEST(KVPlanCli, ExplicitOptionsOverrideThePreset) {
  SKIP_WITHOUT_CLI();
  const RunResult r =
      run_cli("kv-plan --preset llama3-70b --kv-heads 64 --dtype int8 --tp 16 --memory 160000000000 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("bytes_per_token").get<int64_t>(), 2 * 80 * 64 * (128 + 4));
  EXPECT_EQ(j.at("scale_bytes_per_token").get<int64_t>(), 2 * 80 * 64 * 4);
  EXPECT_EQ(j.at("kv_heads_per_shard").get<int64_t>(), 4);
  EXPECT_EQ(j.at("mqa").at("replication").get<int64_t>(), 16);
  EXPECT_EQ(j.at("memory").get<int64_t>(), 160'000'000'000);
}

TEST(KVPlanCli, TableUsesHumanUnits) {
  SKIP_WITHOUT_CLI();
  const RunResult r = run_cli("kv-plan --preset llama3-70b");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* s : {"2.5 MiB", "320 KiB", "40 KiB", "85.9 GB", "10.7 GB", "1.34 GB", "25.6 ms", "3.21 ms"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << " missing from:\n" << r.out;
  }
}

TEST(KVPlanCli, BadShapeIsOneLineAndExitTwo) {
  SKIP_WITHOUT_CLI();
  for (const char* args : {"kv-plan --layers 2 --heads 6 --kv-heads 4 --head-dim 8 --context 16",
                           "kv-plan --layers -3 --heads 8 --head-dim 8 --context 16",
                           "kv-plan --preset llama3-70b --tp 3", "kv-plan --preset nope",
                           "kv-plan --preset llama3-70b --dtype int4",
                           "kv-plan --preset llama3-70b --memory 80GB",
                           "kv-plan --preset llama3-70b --context 9223372036854775807"}) {
    const RunResult r = run_cli(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_TRUE(r.out.empty()) << args << ": " << r.out;
    EXPECT_EQ(r.err.rfind("attnkit: error:", 0), 0u) << args << ": " << r.err;
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace attnkit
