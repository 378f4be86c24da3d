// ImageTrainer's learning rate: warmup + cosine over the steps by default; with anneal_by_time and
// a time budget the decay follows the training time and reaches min_lr when the budget ends,
// long before the step schedule would (a tiny ViT on random 8×8 images, a 0.15 s budget).
#include "attnkit/train/image_trainer.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "attnkit/core/parallel.hpp"
#include "attnkit/models/vit.hpp"

namespace attnkit {
namespace {

ImageDataset random_images(int64_t n, uint32_t seed) {
  ImageDataset ds;
  ds.count = n, ds.rows = 8, ds.cols = 8, ds.classes = 3;
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < n * 64; ++i) ds.images.push_back(uint8_t(rng() % 256));
  for (int64_t i = 0; i < n; ++i) ds.labels.push_back(uint8_t(rng() % 3));
  return ds;
}

VitModel tiny_vit() {
  VitConfig c;
  c.hidden_size = 8, c.num_hidden_layers = 1, c.num_attention_heads = 2, c.intermediate_size = 8;
  c.image_height = c.image_width = 8, c.patch_size = 4, c.num_channels = 1, c.num_labels = 3;
  VitModel m(c);
  m.init_random(1);
  return m;
}

ImageTrainOptions options(const std::string& dir) {
  ImageTrainOptions o;
  o.epochs = 100000;  // the step schedule is nowhere near its end when the budget stops the run
  o.batch = 8;
  o.max_lr = 1e-3, o.min_lr = 1e-5;
  o.warmup_epochs = 0.125;  // 8 steps of 64 per epoch
  o.eval_limit = 8;
  o.progress = false;
  o.out_dir = dir;
  return o;
}

TEST(ImageTrainer, LearningRateFollowsStepsOrTheTimeBudget) {
  const ThreadCountScope one_thread(1);
  const ImageDataset train = random_images(512, 1), test = random_images(8, 2);
  const std::string dir = ::testing::TempDir() + "/image_trainer_lr";
  std::filesystem::remove_all(dir);
  VitModel model = tiny_vit();
  ImageTrainOptions o = options(dir);
  const WarmupCosineSchedule steps{.max_lr = 1e-3, .min_lr = 1e-5, .warmup_steps = 8,
                                   .total_steps = 100000 * 64};
  {
    ImageTrainer by_steps(model, train, test, o);
    for (int64_t s : {0, 3, 8, 50, 3200000, 6399999})
      EXPECT_EQ(by_steps.learning_rate(s), warmup_cosine_lr(steps, s)) << s;
  }
  o.anneal_by_time = true;
  o.max_minutes = 1.0 / 60;  // long enough for the warmup even on a loaded machine or under ASan
  ImageTrainer by_time(model, train, test, o);
  // No training time spent yet: the step schedule.
  for (int64_t s : {0, 8, 50})
    EXPECT_DOUBLE_EQ(by_time.learning_rate(s), warmup_cosine_lr(steps, s)) << s;
  const std::vector<ImageEpochResult> r = by_time.run();
  ASSERT_FALSE(r.empty());
  const int64_t done = r.back().step;
  ASSERT_GT(done, 8);               // past the warmup
  ASSERT_LT(done, 100000 * 64 / 2);  // stopped by the budget
  EXPECT_DOUBLE_EQ(by_time.learning_rate(done), 1e-5);
  EXPECT_GT(warmup_cosine_lr(steps, done), 0.9e-3);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnkit
