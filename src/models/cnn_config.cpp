// CnnConfig: config.json parsing, serialisation and validation.
#include <algorithm>

#include "attnkit/core/error.hpp"
#include "attnkit/models/cnn.hpp"
#include "attnkit/models/config_reader.hpp"
#include "image_config.hpp"

namespace attnkit {

ChannelAttention parse_channel_attention(const std::string& name, const char* what) {
  if (name == "none") return ChannelAttention::kNone;
  if (name == "se") return ChannelAttention::kSe;
  if (name == "cbam") return ChannelAttention::kCbam;
  fail(what, ": expected none, se or cbam, got '", name, "'");
}

const char* channel_attention_name(ChannelAttention a) {
  switch (a) {
    case ChannelAttention::kSe: return "se";
    case ChannelAttention::kCbam: return "cbam";
    default: return "none";
  }
}

namespace {
constexpr std::pair<const char*, ChannelAttention> kAttentions[] = {
    {"none", ChannelAttention::kNone}, {"se", ChannelAttention::kSe}, {"cbam", ChannelAttention::kCbam}};
}  // namespace

CnnConfig parse_cnn_config(const std::string& json_text, const std::string& source) {
  return image_config::parse<CnnConfig>(json_text, source, "cnn", [](ConfigReader& r, CnnConfig& c) {
    c.attention = r.choice("attention", ChannelAttention::kNone, kAttentions);
    c.reduction = r.integer("reduction", c.reduction);
    c.spatial_kernel = r.integer("spatial_kernel", c.spatial_kernel);
  });
}

std::string cnn_config_to_json(const CnnConfig& c) {
  return image_config::to_json(c, "cnn", [&](ConfigWriter& w) {
    w.set("attention", channel_attention_name(c.attention))
        .set("reduction", c.reduction)
        .set("spatial_kernel", c.spatial_kernel);
  });
}

void validate(const CnnConfig& c) {
  image_config::validate_shared(c, "cnn", 1, 8, " (the stem, then one per residual stage)");
  // The stem pools once and every stage but the last pools once more.
  const int64_t pools = std::max<int64_t>(1, int64_t(c.widths.size()) - 1);
  int64_t s = c.image_size;
  for (int64_t i = 0; i < pools; ++i) {
    s /= 2;
    check(s >= 1, "cnn config: 'image_size' ", c.image_size, " is too small for ", pools,
          " poolings by 2");
  }
  check(c.reduction >= 1, "cnn config: 'reduction' must be >= 1, got ", c.reduction);
  check(c.spatial_kernel >= 1 && c.spatial_kernel % 2 == 1 && c.spatial_kernel <= 15,
        "cnn config: 'spatial_kernel' must be odd and in [1, 15], got ", c.spatial_kernel);
}

}  // namespace attnkit
