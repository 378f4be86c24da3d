// The process-wide matmul precision of the linear and convolution layers (f32 default, opt-in bf16).
#include "attnkit/ops/matmul_precision.hpp"

#include <atomic>

#include "attnkit/core/error.hpp"
#include "attnkit/ops/gemm_bf16.hpp"

namespace attnkit {
namespace {

std::atomic<int> g_precision{int(MatmulPrecision::kF32)};

}  // namespace

MatmulPrecision matmul_precision() { return MatmulPrecision(g_precision.load()); }

void set_matmul_precision(MatmulPrecision p) {
  check(p == MatmulPrecision::kF32 || p == MatmulPrecision::kBf16, "set_matmul_precision: unknown value ",
        int(p));
  check(p != MatmulPrecision::kBf16 || gemm_bf16_available(), "precision bf16: ",
        gemm_bf16_unavailable_reason());
  g_precision.store(int(p));
}

MatmulPrecision parse_matmul_precision(const std::string& name) {
  if (name == "f32") return MatmulPrecision::kF32;
  if (name == "bf16") return MatmulPrecision::kBf16;
  fail("--precision: unknown precision '", name, "' (f32, bf16)");
}

const char* matmul_precision_name(MatmulPrecision p) { return p == MatmulPrecision::kBf16 ? "bf16" : "f32"; }

}  // namespace attnkit
