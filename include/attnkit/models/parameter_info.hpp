#pragma once
// One named tensor inside a model's flat parameter buffer (GPT, BERT): the Hugging Face name,
// the shape, and where its floats live.
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit {

struct ParameterInfo {        // one named tensor inside the flat parameter buffer
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;         // in floats
  int64_t numel = 0;
};

}  // namespace attnkit
