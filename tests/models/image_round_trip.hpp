#pragma once
// Save/load round trip of an image classifier through load_image_classifier, bit for bit; shared
// by the CNN and deformable model tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/models/image_classifier.hpp"
#include "test_dirs.hpp"

namespace attnkit {

// Moves m's running statistics with one training-mode forward of x [N, C, H, W], saves m to a
// scratch directory and loads it back; expects model_type `type` and the same parameters,
// buffers and eval logits [N, K] bit for bit. Returns the loaded model (null if the type differs).
inline std::unique_ptr<ImageClassifier> expect_bitwise_round_trip(ImageClassifier& m, ConstView4 x,
                                                                  const std::string& type) {
  m.set_training(true);
  m.forward(x);
  m.set_training(false);
  const ConstView2 y = m.forward(x);
  const std::vector<float> want(y.data, y.data + y.numel());
  const std::string dir = fresh_dir("attnkit_" + type + "_roundtrip");
  m.save(dir);
  std::unique_ptr<ImageClassifier> back = load_image_classifier(dir);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(back->model_type(), type);
  if (back->model_type() != type) return nullptr;
  EXPECT_TRUE(std::equal(m.parameters().begin(), m.parameters().end(), back->parameters().begin()));
  EXPECT_TRUE(std::equal(m.buffers().begin(), m.buffers().end(), back->buffers().begin()));
  const ConstView2 z = back->forward(x);
  EXPECT_EQ(std::vector<float>(z.data, z.data + z.numel()), want);
  return back;
}

}  // namespace attnkit
