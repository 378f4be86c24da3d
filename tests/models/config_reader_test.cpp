// Config reading shared by every model (models/config_reader.hpp) and the model_type registry
// (models/model_registry.hpp): errors name the key and the file, unknown keys are refused while
// Hugging Face bookkeeping keys are accepted, sizes are bounded, labels are read and written in
// one place, and model_type is parsed (compact JSON works) rather than string-matched.
#include "attnkit/models/config_reader.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "attnkit/models/bert_config.hpp"
#include "attnkit/models/cnn.hpp"
#include "attnkit/models/deformable_classifier.hpp"
#include "attnkit/models/gpt_config.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/models/vit_config.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

constexpr const char* kGpt = R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8,
  "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2)";
constexpr const char* kBert = R"({"model_type": "bert", "vocab_size": 10, "hidden_size": 8,
  "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2)";
constexpr const char* kVit = R"({"model_type": "vit", "hidden_size": 8, "num_hidden_layers": 1,
  "num_attention_heads": 2, "intermediate_size": 16, "image_size": 8, "patch_size": 4)";

std::string with(const char* base, const std::string& more) { return std::string(base) + more + "}"; }

TEST(ConfigReader, TypedGettersNameTheKeyAndTheFile) {
  ConfigReader r(R"({"a": "x", "b": 1.5, "c": [1, "2"], "d": 3})", "dir/config.json");
  for (const std::string& e : {error_of([&] { r.integer("a"); }), error_of([&] { r.integer("b", 0); }),
                               error_of([&] { r.boolean("d", false); }),
                               error_of([&] { r.integers("c", {}); })})
    EXPECT_TRUE(contains(e, "dir/config.json: '")) << e;
  EXPECT_TRUE(contains(error_of([&] { r.integer("missing"); }), "missing required key 'missing'"));
  EXPECT_EQ(r.integer("d"), 3);
  EXPECT_EQ(r.integer("absent", 7), 7);
  EXPECT_EQ(r.number("b", 0), 1.5);
  EXPECT_TRUE(contains(error_of([] { ConfigReader("{", "f.json"); }), "f.json: invalid JSON"));
  EXPECT_TRUE(contains(error_of([] { ConfigReader("[1]", "f.json"); }), "JSON object"));
}

TEST(ConfigReader, UnknownKeysAreRefusedByEveryModelButHfBookkeepingIsNot) {
  const std::string typo = R"(, "hiden_size": 8)";
  for (const std::string& e :
       {error_of([&] { parse_gpt_config(with(kGpt, typo), "g/config.json"); }),
        error_of([&] { parse_bert_config(with(kBert, typo), "g/config.json"); }),
        error_of([&] { parse_vit_config(with(kVit, typo), "g/config.json"); }),
        error_of([&] { parse_cnn_config(R"({"model_type": "cnn", "hiden_size": 8})", "g/config.json"); }),
        error_of([&] {
          parse_deformable_config(R"({"model_type": "deformable", "hiden_size": 8})", "g/config.json");
        })}) {
    EXPECT_TRUE(contains(e, "g/config.json")) << e;
    EXPECT_TRUE(contains(e, "unknown key 'hiden_size'")) << e;
  }
  const std::string hf = R"(, "transformers_version": "4.46.0", "torch_dtype": "bfloat16",
      "_name_or_path": "x", "use_cache": true, "architectures": )";
  EXPECT_NO_THROW(parse_gpt_config(with(kGpt, hf + R"(["LlamaForCausalLM"], "rope_scaling": null,
      "attention_dropout": 0.0, "mlp_bias": false, "bos_token_id": 1, "eos_token_id": [2, 3])")));
  EXPECT_NO_THROW(parse_bert_config(with(kBert, hf + R"(["BertForMaskedLM"],
      "position_embedding_type": "absolute", "gradient_checkpointing": false)")));
  EXPECT_NO_THROW(parse_vit_config(with(kVit, hf + R"(["ViTForImageClassification"], "encoder_stride": 4)")));
  // Options attnkit implements one way only are refused, not ignored, when set otherwise.
  EXPECT_TRUE(contains(error_of([] { parse_gpt_config(with(kGpt, R"(, "rope_scaling": {"type": "linear"})")); }),
                       "'rope_scaling' must be null"));
  EXPECT_TRUE(contains(error_of([] { parse_bert_config(with(kBert, R"(, "position_embedding_type": "relative_key")")); }),
                       "position_embedding_type"));
}

TEST(ConfigReader, HugeOrNonPositiveSizesAreRefusedNamingTheKey) {
  EXPECT_TRUE(contains(error_of([] { parse_gpt_config(with(kGpt, R"(, "max_position_embeddings": 1000000000000)")); }),
                       "'max_position_embeddings' must be in [1, 4194304]"));
  EXPECT_TRUE(contains(error_of([] { parse_gpt_config(with(kGpt, R"(, "max_position_embeddings": 1e12)")); }),
                       "'max_position_embeddings' must be an integer"));
  EXPECT_TRUE(contains(error_of([] { parse_bert_config(R"({"vocab_size": 10, "hidden_size": 1000000000000,
      "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2})"); }), "'hidden_size'"));
  EXPECT_TRUE(contains(error_of([] { parse_vit_config(with(kVit, R"(, "num_hidden_layers": 0)")); }),
                       "num_hidden_layers"));
  EXPECT_TRUE(contains(error_of([] { parse_gpt_config(with(kGpt, R"(, "num_key_value_heads": -2)")); }),
                       "'num_key_value_heads' must be in [1"));
  EXPECT_TRUE(contains(error_of([] { parse_cnn_config(R"({"model_type": "cnn", "image_size": 99999999999})"); }),
                       "'image_size'"));
  EXPECT_TRUE(contains(error_of([] { parse_vit_config(R"({"model_type": "vit", "hidden_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 16, "image_size": [8, 1000000000], "patch_size": 4})"); }),
                       "'image_size'"));
}

TEST(ConfigReader, LabelsAreReadAndWrittenTheSameWayByEveryModel) {
  const std::string labels = R"(, "id2label": {"0": "cat", "1": "dog", "2": "eel"})";
  EXPECT_EQ(parse_bert_config(with(kBert, labels)).num_labels, 3);
  EXPECT_EQ(parse_vit_config(with(kVit, labels)).num_labels, 3);
  EXPECT_EQ(parse_cnn_config(R"({"model_type": "cnn")" + labels + "}").num_labels, 3);
  EXPECT_EQ(parse_deformable_config(R"({"model_type": "deformable")" + labels + "}").num_labels, 3);
  EXPECT_EQ(parse_cnn_config(R"({"model_type": "cnn")" + labels + "}").labels[2], "eel");
  // num_labels and label2id must agree with id2label.
  EXPECT_TRUE(contains(error_of([&] { parse_cnn_config(R"({"model_type": "cnn", "num_labels": 4)" + labels + "}"); }),
                       "'num_labels' (4) disagrees with id2label"));
  EXPECT_TRUE(contains(error_of([&] { parse_vit_config(with(kVit, labels + R"(, "label2id": {"cat": 1})")); }),
                       "label2id"));
  EXPECT_TRUE(contains(error_of([] { parse_bert_config(with(kBert, R"(, "id2label": {"0": "a", "2": "b"})")); }),
                       "id2label"));
  // Every writer emits num_labels, id2label and label2id, and reads them back.
  CnnConfig cnn;
  cnn.num_labels = 2, cnn.labels = {"no", "yes"};
  DeformableConfig def;
  def.num_labels = 2, def.labels = {"no", "yes"};
  VitConfig vit;
  vit.num_labels = 2, vit.labels = {"no", "yes"};
  BertConfig bert;
  bert.num_labels = 2, bert.labels = {"no", "yes"};
  for (const std::string& text : {cnn_config_to_json(cnn), deformable_config_to_json(def),
                                  vit_config_to_json(vit), bert_config_to_json(bert)}) {
    EXPECT_TRUE(contains(text, R"("label2id": {)")) << text;
    EXPECT_TRUE(contains(text, R"("id2label": {)")) << text;
    EXPECT_TRUE(contains(text, R"("num_labels": 2)")) << text;
  }
  EXPECT_EQ(parse_cnn_config(cnn_config_to_json(cnn)).labels, cnn.labels);
  EXPECT_EQ(parse_deformable_config(deformable_config_to_json(def)).labels, def.labels);
  EXPECT_EQ(parse_vit_config(vit_config_to_json(vit)).labels, vit.labels);
  EXPECT_EQ(parse_bert_config(bert_config_to_json(bert)).labels, bert.labels);
}

TEST(ModelRegistry, ParsesModelTypeFromAnyJsonLayout) {
  EXPECT_EQ(model_type_of_config(R"({"model_type":"bert"})", "c").kind, ModelKind::kBert);
  EXPECT_EQ(model_type_of_config("{\n\t\"model_type\" :\n \"llama\" }", "c").kind, ModelKind::kGpt);
  for (const char* t : {"vit", "cnn", "deformable"})
    EXPECT_EQ(model_type_of_config(std::string(R"({"model_type":")") + t + "\"}", "c").kind, ModelKind::kImage);
  // A string that merely contains the words is not a model type.
  EXPECT_TRUE(contains(error_of([] { model_type_of_config(R"({"note": "\"model_type\": \"bert\""})", "d/config.json"); }),
                       "d/config.json: missing string key 'model_type'"));
  EXPECT_TRUE(contains(error_of([] { model_type_of_config(R"({"model_type": "gpt2"})", "d/config.json"); }),
                       "unknown model_type 'gpt2'"));
  EXPECT_EQ(model_types().size(), 5u);
}

TEST(ModelRegistry, WrongKindOfDirectoryIsNamed) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "attnkit_registry_test";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type":"bert","vocab_size":10})";
  const std::string e = error_of([&] { require_model_kind(dir.string(), ModelKind::kGpt, "generate"); });
  EXPECT_EQ(e, "`generate` needs a GPT model; " + dir.string() + " holds a bert model");
  EXPECT_EQ(&require_model_kind(dir.string(), ModelKind::kBert, "eval"), &model_type_of_dir(dir.string()));
  fs::remove_all(dir);
  EXPECT_TRUE(contains(error_of([&] { model_type_of_dir(dir.string()); }), "config.json"));
}

}  // namespace
}  // namespace attnkit
