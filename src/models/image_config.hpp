#pragma once
// The config.json fields the convolutional image classifiers share (CnnConfig, DeformableConfig):
// num_channels, image_size, num_labels / id2label, widths, and the batch norms' eps and momentum.
// One reader, writer and range check for both, so the two keep the same keys, defaults and
// messages ("<model> config: 'key' must be in [lo, hi], got v").
#include <cstdint>
#include <string>

#include "attnkit/core/error.hpp"
#include "attnkit/models/config_reader.hpp"

namespace attnkit::image_config {

// num_channels, image_size, labels (num_labels / id2label), widths, in that order.
template <class Config>
void read_head(ConfigReader& r, Config& c) {
  c.num_channels = r.size("num_channels", c.num_channels, kMaxConfigWidth);
  c.image_size = r.size("image_size", c.image_size, kMaxConfigImageSide);
  const ConfigLabels labels = r.labels(c.num_labels);
  c.num_labels = labels.num_labels;
  c.labels = labels.names;
  c.widths = r.integers("widths", c.widths);
}

template <class Config>
void read_batch_norm(ConfigReader& r, Config& c) {
  c.batch_norm_eps = r.number("batch_norm_eps", c.batch_norm_eps);
  c.batch_norm_momentum = r.number("batch_norm_momentum", c.batch_norm_momentum);
}

// model_type, then the fields read_head reads.
template <class Config>
ConfigWriter& write_head(ConfigWriter& w, const char* model_type, const Config& c) {
  return w.set("model_type", model_type)
      .set("num_channels", c.num_channels)
      .set("image_size", c.image_size)
      .labels(c.num_labels, c.labels)
      .set("widths", std::span<const int64_t>(c.widths));
}

template <class Config>
ConfigWriter& write_batch_norm(ConfigWriter& w, const Config& c) {
  return w.set("batch_norm_eps", c.batch_norm_eps).set("batch_norm_momentum", c.batch_norm_momentum);
}

// Parses config.json text: model_type (required, `model_type`), the read_head fields, the model's
// own keys (read_own(r, c)), the batch norms; refuses unknown keys, then validate(c).
template <class Config, class ReadOwn>
Config parse(const std::string& text, const std::string& source, const char* model_type,
             ReadOwn read_own) {
  ConfigReader r(text, source);
  r.model_type({model_type}, true);
  Config c;
  read_head(r, c);
  read_own(r, c);
  read_batch_norm(r, c);
  r.finish();
  r.validate_with([&] { validate(c); });
  return c;
}

// config.json text: the write_head fields, the model's own keys (write_own(w)), the batch norms.
template <class Config, class WriteOwn>
std::string to_json(const Config& c, const char* model_type, WriteOwn write_own) {
  ConfigWriter w;
  write_own(write_head(w, model_type, c));
  write_batch_norm(w, c);
  return w.text();
}

// Range checks of the shared fields; `who` is "cnn" or "deformable"; widths needs
// [min_widths, max_widths] entries (explained by `widths_why`).
template <class Config>
void validate_shared(const Config& c, const char* who, size_t min_widths, size_t max_widths,
                     const char* widths_why) {
  auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  check(in(c.num_channels, 1, 64), who, " config: 'num_channels' must be in [1, 64], got ", c.num_channels);
  check(in(c.image_size, 1, 4096), who, " config: 'image_size' must be in [1, 4096], got ", c.image_size);
  check(in(c.num_labels, 2, 100000), who, " config: 'num_labels' must be in [2, 100000], got ", c.num_labels);
  check(c.widths.size() >= min_widths && c.widths.size() <= max_widths, who, " config: 'widths' needs ",
        min_widths, " to ", max_widths, " entries", widths_why, ", got ", c.widths.size());
  for (int64_t w : c.widths)
    check(in(w, 1, 4096), who, " config: every 'widths' entry must be in [1, 4096], got ", w);
  check(c.batch_norm_eps >= 0, who, " config: 'batch_norm_eps' must be >= 0");
  check(c.batch_norm_momentum >= 0 && c.batch_norm_momentum <= 1, who,
        " config: 'batch_norm_momentum' must be in [0, 1]");
  check(c.labels.empty() || int64_t(c.labels.size()) == c.num_labels, who,
        " config: 'id2label' must name every label");
}

}  // namespace attnkit::image_config
