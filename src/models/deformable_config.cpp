// DeformableConfig: config.json parsing (models/config_reader.hpp), serialisation, validation.
#include <algorithm>

#include "attnkit/core/error.hpp"
#include "attnkit/models/config_reader.hpp"
#include "attnkit/models/deformable_classifier.hpp"
#include "image_config.hpp"

namespace attnkit {

std::vector<int64_t> deformable_map_sizes(const DeformableConfig& c) {
  std::vector<int64_t> s{c.image_size};
  for (size_t i = 1; i < c.widths.size(); ++i) s.push_back((s.back() + 1) / 2);  // 3×3, stride 2, pad 1
  return s;
}

DeformableConfig parse_deformable_config(const std::string& json_text, const std::string& source) {
  auto read_own = [](ConfigReader& r, DeformableConfig& c) {
    if (r.has("levels") && r.integer("levels", 0) != c.levels())
      r.fail_key("levels", "(", r.integer("levels", 0), ") must equal len(widths) - 1 = ", c.levels(),
                 " (one level per stride-2 backbone stage)");
    r.integer("levels", 0);
    c.d_model = r.integer("d_model", c.d_model);
    c.heads = r.integer("heads", c.heads);
    c.points = r.integer("points", c.points);
    c.layers = r.integer("layers", c.layers);
    c.ffn_dim = r.integer("ffn_dim", c.ffn_dim);
    c.layer_norm_eps = r.number("layer_norm_eps", c.layer_norm_eps);
  };
  return image_config::parse<DeformableConfig>(json_text, source, "deformable", read_own);
}

std::string deformable_config_to_json(const DeformableConfig& c) {
  return image_config::to_json(c, "deformable", [&](ConfigWriter& w) {
    w.set("levels", c.levels())
        .set("d_model", c.d_model)
        .set("heads", c.heads)
        .set("points", c.points)
        .set("layers", c.layers)
        .set("ffn_dim", c.ffn_dim)
        .set("layer_norm_eps", c.layer_norm_eps);
  });
}

void validate(const DeformableConfig& c) {
  auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  image_config::validate_shared(c, "deformable", 2, 9, " (the stem, then one per level)");
  check(in(c.heads, 1, 256), "deformable config: 'heads' must be in [1, 256], got ", c.heads);
  check(in(c.d_model, 4, 8192) && c.d_model % 4 == 0 && c.d_model % c.heads == 0,
        "deformable config: 'd_model' (", c.d_model,
        ") must be a multiple of 4 (sine embedding) and of 'heads' (", c.heads, ")");
  check(in(c.points, 1, 64), "deformable config: 'points' must be in [1, 64], got ", c.points);
  check(in(c.layers, 1, 64), "deformable config: 'layers' must be in [1, 64], got ", c.layers);
  check(in(c.ffn_dim, 1, 65536), "deformable config: 'ffn_dim' must be in [1, 65536], got ",
        c.ffn_dim);
  check(c.layer_norm_eps > 0, "deformable config: 'layer_norm_eps' must be > 0");
}

}  // namespace attnkit
