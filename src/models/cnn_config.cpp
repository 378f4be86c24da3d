// CnnConfig: config.json parsing, serialisation and validation.
#include <algorithm>

#include "attnkit/core/error.hpp"
#include "attnkit/models/cnn.hpp"
#include "attnkit/models/config_reader.hpp"

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
  ConfigReader r(json_text, source);
  r.model_type({"cnn"}, true);
  CnnConfig c;
  c.num_channels = r.size("num_channels", c.num_channels, kMaxConfigWidth);
  c.image_size = r.size("image_size", c.image_size, kMaxConfigImageSide);
  const ConfigLabels labels = r.labels(c.num_labels);
  c.num_labels = labels.num_labels;
  c.labels = labels.names;
  c.widths = r.integers("widths", c.widths);
  c.attention = r.choice("attention", ChannelAttention::kNone, kAttentions);
  c.reduction = r.integer("reduction", c.reduction);
  c.spatial_kernel = r.integer("spatial_kernel", c.spatial_kernel);
  c.batch_norm_eps = r.number("batch_norm_eps", c.batch_norm_eps);
  c.batch_norm_momentum = r.number("batch_norm_momentum", c.batch_norm_momentum);
  r.finish();
  r.validate_with([&] { validate(c); });
  return c;
}

std::string cnn_config_to_json(const CnnConfig& c) {
  ConfigWriter w;
  w.set("model_type", "cnn")
      .set("num_channels", c.num_channels)
      .set("image_size", c.image_size)
      .labels(c.num_labels, c.labels)
      .set("widths", std::span<const int64_t>(c.widths))
      .set("attention", channel_attention_name(c.attention))
      .set("reduction", c.reduction)
      .set("spatial_kernel", c.spatial_kernel)
      .set("batch_norm_eps", c.batch_norm_eps)
      .set("batch_norm_momentum", c.batch_norm_momentum);
  return w.text();
}

void validate(const CnnConfig& c) {
  check(c.num_channels >= 1 && c.num_channels <= 64, "cnn config: 'num_channels' must be in [1, 64], got ",
        c.num_channels);
  check(c.num_labels >= 2 && c.num_labels <= 100000, "cnn config: 'num_labels' must be in [2, 100000], got ",
        c.num_labels);
  check(!c.widths.empty() && c.widths.size() <= 8, "cnn config: 'widths' needs 1 to 8 entries");
  for (int64_t w : c.widths)
    check(w >= 1 && w <= 4096, "cnn config: every 'widths' entry must be in [1, 4096], got ", w);
  check(c.image_size >= 1 && c.image_size <= 4096, "cnn config: 'image_size' must be in [1, 4096]");
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
  check(c.batch_norm_eps >= 0, "cnn config: 'batch_norm_eps' must be >= 0");
  check(c.batch_norm_momentum >= 0 && c.batch_norm_momentum <= 1,
        "cnn config: 'batch_norm_momentum' must be in [0, 1]");
  check(c.labels.empty() || int64_t(c.labels.size()) == c.num_labels,
        "cnn config: 'id2label' must name every label");
}

}  // namespace attnkit
