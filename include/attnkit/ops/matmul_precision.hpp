#pragma once
// The precision of the linear and convolution layers' matrix products: float32 (the default) or
// the opt-in bf16 mixed-precision mode, where linear_forward / linear_backward (y, d_x, d_W) run on
// gemm_bf16 and conv2d_forward / conv2d_backward on oneDNN's bf16 convolution or gemm_bf16 (bf16
// inputs, float32 accumulation and outputs) while weights, gradients, optimizer state and every
// other op (attention, norms, softmax, loss) stay float32.
// PyTorch: torch.autocast("cpu", dtype=torch.bfloat16) around forward and loss.
#include <string>

#include "attnkit/core/scoped_setting.hpp"

namespace attnkit {

enum class MatmulPrecision { kF32 = 0, kBf16 = 1 };

// The process-wide precision of linear and convolution layers; kF32 unless set_matmul_precision
// changed it.
MatmulPrecision matmul_precision();
// Sets it for the whole process. kBf16 throws attnkit::Error when !gemm_bf16_available().
void set_matmul_precision(MatmulPrecision p);
// Parses "f32" or "bf16" (the CLI's --precision); throws attnkit::Error on anything else.
MatmulPrecision parse_matmul_precision(const std::string& name);
// "f32" or "bf16".
const char* matmul_precision_name(MatmulPrecision p);

// Sets the precision for the scope's lifetime, then restores the previous value.
using MatmulPrecisionScope = ScopedSetting<MatmulPrecision, matmul_precision, set_matmul_precision>;

}  // namespace attnkit
