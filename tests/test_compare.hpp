#pragma once
// Worst-error tracking for tests: a NaN error counts as infinitely bad. (std::max(worst, NaN)
// returns worst, so a NaN result would vanish from a running maximum and the test would pass.)
#include <algorithm>
#include <cmath>

namespace attnkit {

// The larger of the running worst error and err; +inf if either is NaN.
inline double worse_error(double worst, double err) {
  return std::isnan(worst) || std::isnan(err) ? INFINITY : std::max(worst, err);
}

}  // namespace attnkit
