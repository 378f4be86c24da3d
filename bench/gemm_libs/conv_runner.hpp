#pragma once
// A convolution layer of the CNN run by oneDNN's own convolution primitive (onednn_conv.cpp).
#include <memory>

#include "backends.hpp"

namespace gemm_libs {

struct ConvShape {            // x [n, c, h, w] → y [n, o, h, w], kernel × kernel, stride 1, same padding
  int64_t n, c, o, h, w, kernel;
  double flops() const { return 2.0 * double(n * o * h * w) * double(c * kernel * kernel); }
};

std::unique_ptr<Runner> make_onednn_conv(const ConvShape& s);

}  // namespace gemm_libs
