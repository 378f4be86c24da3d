// RoPE rotation (rotate_half pairing) and its cos/sin tables.
#include "attnkit/ops/rope.hpp"

#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include "attnkit/core/error.hpp"

namespace attnkit {

RopeTable::RopeTable(int64_t d, double theta, int64_t max_position)
    : head_dim_(d), max_position_(max_position), theta_(theta) {
  check(d >= 2 && d % 2 == 0, "rope: head_dim must be even and >= 2, got ", d);
  check(theta > 0, "rope: theta must be > 0, got ", theta);
  check(max_position >= 0, "rope: max_position must be >= 0");
  const int64_t half = d / 2;
  cos_.resize(size_t(max_position * half));
  sin_.resize(cos_.size());
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * double(i) / double(d));
    for (int64_t p = 0; p < max_position; ++p) {
      cos_[size_t(p * half + i)] = float(std::cos(double(p) * inv_freq));
      sin_[size_t(p * half + i)] = float(std::sin(double(p) * inv_freq));
    }
  }
}

std::shared_ptr<const RopeTable> rope_table_for(int64_t d, double theta, int64_t positions) {
  static std::mutex mu;
  static std::map<std::pair<int64_t, double>, std::shared_ptr<const RopeTable>> tables;
  std::lock_guard<std::mutex> lock(mu);
  auto& t = tables[{d, theta}];
  if (!t || t->max_position() < positions)
    t = std::make_shared<const RopeTable>(d, theta, std::max<int64_t>(positions, t ? 2 * t->max_position() : 1024));
  return t;
}

void rope_rotate(float* x, int64_t d, const float* cos, const float* sin, float sign) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half], c = cos[i], s = sign * sin[i];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

void rope_rotate_at(float* x, int64_t d, double pos, double theta, float sign) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = pos * std::pow(theta, -2.0 * double(i) / double(d));
    const float a = x[i], b = x[i + half];
    const float c = float(std::cos(angle)), s = sign * float(std::sin(angle));
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

}  // namespace attnkit
