// GPT training in the bf16 mixed-precision mode (TrainOptions::precision): a few optimizer steps of
// the tiny preset from the same initialisation and the same windows as float32. The loss must fall
// and follow the float32 run closely; the precision must not leak out of the trainer's steps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/io/text_corpus.hpp"
#include "attnkit/ops/gemm_bf16.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "attnkit/train/gpt_trainer.hpp"
#include "attnkit/train/presets.hpp"
#include "test_dirs.hpp"

namespace attnkit {
namespace {

std::vector<std::string> documents() {
  std::vector<std::string> docs;
  const char* lines[] = {"the quick brown fox jumps over the lazy dog. ", "a stitch in time saves nine. ",
                         "all that glitters is not gold. ", "where there is a will there is a way. "};
  for (int d = 0; d < 40; ++d) {
    std::string doc;
    for (int r = 0; r < 6; ++r) doc += lines[(d + r) % 4];
    docs.push_back(doc);
  }
  return docs;
}

std::vector<float> losses(MatmulPrecision precision, const TextCorpus& corpus, const std::string& out) {
  GptModel model(gpt_preset("tiny"));
  model.init_random(3);
  TrainOptions o;
  o.steps = 16, o.batch = 4, o.seq_len = 64, o.eval_every = 0, o.checkpoint_every = 0;
  o.schedule = {.max_lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 4, .total_steps = 16};
  o.out_dir = out, o.progress = false, o.precision = precision;
  GptTrainer trainer(model, corpus, o);
  std::vector<float> l;
  for (int64_t s = 0; s < o.steps; ++s) l.push_back(trainer.step(s).loss);
  return l;
}

TEST(GptBf16Training, LossFallsAndFollowsFloat32) {
  if (!gemm_bf16_available()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  const ThreadCountScope one(1);  // tiny products: thread hand-offs would dominate the time
  const ScratchDir dir("gpt_bf16");
  const TextCorpus corpus(documents());
  const std::vector<float> f32 = losses(MatmulPrecision::kF32, corpus, dir.path("f32"));
  const std::vector<float> bf16 = losses(MatmulPrecision::kBf16, corpus, dir.path("bf16"));
  EXPECT_EQ(matmul_precision(), MatmulPrecision::kF32);  // the trainer's scope ended with its steps
  ASSERT_EQ(f32.size(), bf16.size());
  EXPECT_NE(f32, bf16);  // the mode changed the products
  // Step 0 sees the same weights: only the bf16 rounding of the products differs (relative 2^-8
  // per product, averaged over the tokens). Later steps compound it through the updates.
  for (size_t s = 0; s < f32.size(); ++s)
    EXPECT_NEAR(bf16[s], f32[s], (s == 0 ? 0.002 : 0.02) * f32[s]) << "step " << s;
  EXPECT_LT(bf16.back(), bf16.front() - 0.5f);  // it learns: about ln 259 = 5.56 → well below 5
}

}  // namespace
}  // namespace attnkit
