// MHA → GQA conversion: the pooled K/V projections equal the formula exactly (mean in double,
// one rounding; first; a seeded random head shared by K and V), every other tensor is copied
// bit for bit, --kv-heads equal to the current count is the identity, and bad arguments are
// refused before anything is written.
#include "attnkit/tools/convert_gqa.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "attnkit/core/error.hpp"
#include "attnkit/io/safetensors.hpp"
#include "attnkit/models/gpt.hpp"
#include "test_dirs.hpp"

namespace attnkit {
namespace {

namespace fs = std::filesystem;

class ConvertGqa : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return scratch_.path(name); }

  // A tiny MHA (or GQA) model with q/k/v biases and untied head, saved to path(name).
  GptModel save_model(const std::string& name, int64_t kv_heads) {
    GptConfig c;
    c.vocab_size = 20, c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 2;
    c.num_attention_heads = 8, c.num_key_value_heads = kv_heads, c.head_dim = 4;
    c.max_position_embeddings = 16, c.attention_bias = true, c.tie_word_embeddings = false;
    GptModel m(c);
    m.init_random(7);
    for (auto& x : m.parameters()) x += 0.01f;  // biases non-zero too
    m.save(path(name));
    return m;
  }
  ScratchDir scratch_{"attnkit_gqa"};
};

// Rows [h·D, (h+1)·D) of a K/V tensor [Hkv·D, cols] (cols = 1 for a bias).
std::vector<float> head_rows(std::span<const float> x, int64_t h, int64_t d, int64_t cols) {
  return {x.begin() + h * d * cols, x.begin() + (h + 1) * d * cols};
}

bool is_kv(const std::string& name) {
  return name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos;
}

TEST_F(ConvertGqa, MeanEqualsTheFormulaAndOtherTensorsAreCopied) {
  const GptModel in = save_model("mha", 8);
  for (int64_t n : {4, 2, 1}) {
    const std::string out = path("mean" + std::to_string(n));
    convert_gqa(path("mha"), out, {.kv_heads = n, .method = GqaPoolMethod::mean});
    const GptModel conv = GptModel::load(out);
    EXPECT_EQ(conv.config().num_key_value_heads, n);
    EXPECT_EQ(conv.config().num_attention_heads, 8);
    const int64_t m = 8 / n, d = 4;
    for (const auto& p : in.parameter_info()) {
      const auto x = in.vec(p.name), y = conv.vec(p.name);
      if (!is_kv(p.name)) {
        ASSERT_EQ(std::vector<float>(x.begin(), x.end()), std::vector<float>(y.begin(), y.end())) << p.name;
        continue;
      }
      const int64_t cols = p.shape.size() == 2 ? p.shape[1] : 1;
      ASSERT_EQ(int64_t(y.size()), n * d * cols) << p.name;
      for (int64_t g = 0; g < n; ++g)
        for (int64_t e = 0; e < d * cols; ++e) {
          double sum = 0;
          for (int64_t j = 0; j < m; ++j) sum += double(x[size_t((g * m + j) * d * cols + e)]);
          ASSERT_EQ(y[size_t(g * d * cols + e)], float(sum / double(m))) << p.name << " g " << g << " e " << e;
        }
    }
  }
}

TEST_F(ConvertGqa, FirstAndRandomCopyOneHeadPerGroup) {
  const GptModel in = save_model("mha", 8);
  convert_gqa(path("mha"), path("first"), {.kv_heads = 2, .method = GqaPoolMethod::first});
  convert_gqa(path("mha"), path("r1"), {.kv_heads = 2, .method = GqaPoolMethod::random, .seed = 5});
  convert_gqa(path("mha"), path("r2"), {.kv_heads = 2, .method = GqaPoolMethod::random, .seed = 5});
  const GptModel first = GptModel::load(path("first")), r1 = GptModel::load(path("r1")),
                 r2 = GptModel::load(path("r2"));
  EXPECT_TRUE(std::equal(r1.parameters().begin(), r1.parameters().end(), r2.parameters().begin()));
  int64_t non_first = 0;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t g = 0; g < 2; ++g) {
      int64_t picked[2] = {-1, -1};  // the head K and V came from
      for (int kv = 0; kv < 2; ++kv) {
        const std::string name = GptModel::layer_name(l, kv == 0 ? "self_attn.k_proj.weight" : "self_attn.v_proj.weight");
        const auto x = in.vec(name);
        EXPECT_EQ(head_rows(first.vec(name), g, 4, 16), head_rows(x, g * 4, 4, 16));
        for (int64_t j = 0; j < 4; ++j)
          if (head_rows(r1.vec(name), g, 4, 16) == head_rows(x, g * 4 + j, 4, 16)) picked[kv] = j;
        const std::string bias = GptModel::layer_name(l, kv == 0 ? "self_attn.k_proj.bias" : "self_attn.v_proj.bias");
        EXPECT_EQ(head_rows(r1.vec(bias), g, 4, 1), head_rows(in.vec(bias), g * 4 + picked[kv], 4, 1));
      }
      ASSERT_GE(picked[0], 0);
      EXPECT_EQ(picked[0], picked[1]) << "K and V of a group come from the same head";
      non_first += picked[0] != 0;
    }
  EXPECT_GT(non_first, 0) << "random never picked anything but the first head (8 draws of 4)";
}

TEST_F(ConvertGqa, SameHeadCountIsTheIdentityBitwise) {
  save_model("mha", 8);
  save_model("gqa", 2);
  for (const char* src : {"mha", "gqa"})
    for (auto method : {GqaPoolMethod::mean, GqaPoolMethod::first, GqaPoolMethod::random}) {
      const std::string out = path(std::string(src) + "_id" + std::to_string(int(method)));
      convert_gqa(path(src), out, {.kv_heads = std::string(src) == "mha" ? 8 : 2, .method = method});
      const SafetensorsFile a(path(src) + "/model.safetensors"), b(out + "/model.safetensors");
      ASSERT_EQ(a.tensors().size(), b.tensors().size());
      for (const auto& t : a.tensors()) {
        const TensorInfo* u = b.find(t.name);
        ASSERT_NE(u, nullptr) << t.name;
        EXPECT_EQ(t.shape, u->shape);
        const auto x = a.bytes(t), y = b.bytes(*u);
        EXPECT_TRUE(x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin())) << t.name;
      }
      EXPECT_EQ(GptModel::load(out).config().num_key_value_heads, GptModel::load(path(src)).config().num_key_value_heads);
    }
}

TEST_F(ConvertGqa, GqaInputPoolsGroupsOfKvHeads) {
  const GptModel in = save_model("gqa", 4);
  convert_gqa(path("gqa"), path("mqa"), {.kv_heads = 1});
  const GptModel out = GptModel::load(path("mqa"));
  const std::string name = GptModel::layer_name(1, "self_attn.k_proj.weight");
  const auto x = in.vec(name);
  for (int64_t e = 0; e < 4 * 16; ++e) {
    double sum = 0;
    for (int64_t j = 0; j < 4; ++j) sum += double(x[size_t(j * 64 + e)]);
    ASSERT_EQ(out.vec(name)[size_t(e)], float(sum / 4.0));
  }
}

TEST_F(ConvertGqa, RefusesBadArgumentsWithoutWriting) {
  save_model("mha", 8);
  const auto before = fs::last_write_time(path("mha") + "/model.safetensors");
  EXPECT_THROW(convert_gqa(path("mha"), path("x3"), {.kv_heads = 3}), Error);   // 3 does not divide 8
  EXPECT_THROW(convert_gqa(path("mha"), path("x0"), {.kv_heads = 0}), Error);
  EXPECT_THROW(convert_gqa(path("mha"), path("x16"), {.kv_heads = 16}), Error);
  EXPECT_FALSE(fs::exists(path("x3")) || fs::exists(path("x0")) || fs::exists(path("x16")));
  EXPECT_THROW(convert_gqa(path("mha"), path("mha"), {.kv_heads = 2}), Error);            // out == in
  EXPECT_THROW(convert_gqa(path("mha"), path("mha") + "/", {.kv_heads = 2}), Error);
  EXPECT_THROW(convert_gqa(path("mha"), path("mha") + "/sub", {.kv_heads = 2}), Error);   // inside in
  EXPECT_THROW(convert_gqa(path("mha"), path("mha") + "/../mha", {.kv_heads = 2}), Error);
  EXPECT_FALSE(fs::exists(path("mha") + "/sub"));
  fs::create_directories(path("full"));
  std::ofstream(path("full") + "/keep.txt") << "x";
  EXPECT_THROW(convert_gqa(path("mha"), path("full"), {.kv_heads = 2}), Error);           // non-empty
  std::ofstream(path("file")) << "x";
  EXPECT_THROW(convert_gqa(path("mha"), path("file"), {.kv_heads = 2}), Error);           // a file
  EXPECT_THROW(convert_gqa(path("missing"), path("y"), {.kv_heads = 2}), Error);
  EXPECT_THROW(parse_gqa_pool_method("median"), Error);
  EXPECT_EQ(fs::last_write_time(path("mha") + "/model.safetensors"), before);
  fs::create_directories(path("empty"));  // an existing empty directory is fine
  convert_gqa(path("mha"), path("empty"), {.kv_heads = 2});
  EXPECT_EQ(GptModel::load(path("empty")).config().num_key_value_heads, 2);
}

}  // namespace
}  // namespace attnkit
