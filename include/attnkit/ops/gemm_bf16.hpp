#pragma once
// bfloat16 GEMM with float32 accumulation, for the opt-in bf16 mixed-precision mode
// (matmul_precision.hpp). A and B are rounded to bfloat16 (8-bit significand, round to nearest
// even), their products summed in float32, C stays float32. Runs oneDNN's matmul, which uses AMX
// tiles or AVX512-BF16 dot products (vdpbf16ps) on CPUs that have them.
// PyTorch: (op(A).bfloat16() @ op(B).bfloat16()).float() + beta·C, as torch.autocast("cpu",
// dtype=torch.bfloat16) computes a linear layer.
#include <cstdint>
#include <string>

namespace attnkit {

// True when gemm_bf16 runs on this process: attnkit was built with oneDNN (ATTNKIT_WITH_DNNL)
// and the CPU has bf16 dot products (AVX512-BF16 or AMX-BF16, as oneDNN detects them).
bool gemm_bf16_available();
// Why gemm_bf16 is unavailable ("" when it is available), e.g. "this CPU has no AVX512-BF16 or AMX".
std::string gemm_bf16_unavailable_reason();
// oneDNN's implementation for a [2048, 256]·[256, 688] product, e.g. "brg:avx512_core_amx_bf16";
// "" when unavailable.
std::string gemm_bf16_implementation();

// C[m, n] = op(A)·op(B) + beta·C with A and B rounded to bfloat16 and float32 accumulation;
// row-major, op(A) is [m, k], op(B) is [k, n]; lda, ldb, ldc are row strides in elements of A, B,
// C as stored (before op). beta = 0 ignores C's contents. Uses blas_threads() threads (1 inside a
// parallel region). Throws attnkit::Error when !gemm_bf16_available().
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same product in double from the bfloat16-rounded A and B (round_to_bf16): the reference
// for gemm_bf16, whose only other error is its float32 accumulation.
void gemm_bf16_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                         float* c, int64_t ldc);

// x rounded to the nearest bfloat16 (ties to even), returned as a float; NaN stays NaN.
float round_to_bf16(float x);

}  // namespace attnkit
