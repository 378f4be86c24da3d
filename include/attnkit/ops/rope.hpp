#pragma once
// Rotary position embedding, Hugging Face Llama convention (rotate_half): for a head vector x of
// even length D, pairs (i, i + D/2) rotate by angle pos·theta^(-2i/D):
//   x'[i] = x[i]·cos - x[i + D/2]·sin,   x'[i + D/2] = x[i + D/2]·cos + x[i]·sin.
// PyTorch: x * cos + rotate_half(x) * sin. Angles are computed in double, so positions up to
// millions stay accurate.
#include <cstdint>
#include <memory>
#include <vector>

namespace attnkit {

// cos/sin of every (position, frequency) for positions [0, max_position): tables [P, D/2].
class RopeTable {
 public:
  RopeTable() = default;
  // Tables for head_dim (even) and theta > 0 up to max_position (exclusive).
  RopeTable(int64_t head_dim, double theta, int64_t max_position);
  int64_t head_dim() const { return head_dim_; }
  double theta() const { return theta_; }
  int64_t max_position() const { return max_position_; }
  const float* cos(int64_t pos) const { return cos_.data() + pos * (head_dim_ / 2); }
  const float* sin(int64_t pos) const { return sin_.data() + pos * (head_dim_ / 2); }

 private:
  int64_t head_dim_ = 0, max_position_ = 0;
  double theta_ = 0;
  std::vector<float> cos_, sin_;
};

// A shared table for (head_dim, theta) covering at least `positions` positions; tables are cached
// process-wide (thread-safe) and grow geometrically, so callers on a hot path do not rebuild them.
std::shared_ptr<const RopeTable> rope_table_for(int64_t head_dim, double theta, int64_t positions);

// Rotates x[D] in place by position `pos` (sign = +1) or back (sign = -1, the backward).
void rope_rotate(float* x, int64_t head_dim, const float* cos, const float* sin, float sign = 1);
// Same with the angle computed on the spot: pos·theta^(-2i/D) in double.
void rope_rotate_at(float* x, int64_t head_dim, double pos, double theta, float sign = 1);

}  // namespace attnkit
