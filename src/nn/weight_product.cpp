// weight_product: C = A·op(W) for a weight W on the packed GEMM path (ops/gemm.hpp,
// sgemm_packed) where it applies, with W packed once per training step, else on parallel_sgemm.
//
// Row tiles: at most kPackedGemmRows rows, and at least 4 tiles when m allows tiles of 64 rows or
// more (so 2-4 threads share a short product); their size depends on m only, and each tile is one
// single-threaded product, so the result is bitwise the same for any thread count.
#include <algorithm>

#include "attnkit/core/parallel.hpp"
#include "attnkit/core/weight_pack_cache.hpp"
#include "attnkit/ops/gemm.hpp"
#include "nn_common.hpp"

namespace attnkit::nn {
namespace {

// op(W) packed: the current training step's entry (made on first use, into the previous step's
// buffer for W), else a fresh packing.
std::shared_ptr<const PackedGemmB> packed_weight(bool trans_w, int64_t k, int64_t n, const float* w,
                                                 int64_t ldw) {
  WeightPackCache* cache = current_weight_pack_cache();
  if (cache == nullptr) return pack_gemm_b(trans_w, k, n, w, ldw);
  const WeightPackKey key{.data = w, .kind = WeightPackKind::kGemmB, .dims = {trans_w, k, n, ldw}};
  return cache->get_as<PackedGemmB>(key, [&](std::shared_ptr<PackedGemmB> previous) {
    return pack_gemm_b(trans_w, k, n, w, ldw, std::move(previous));  // into last step's buffer
  });
}

}  // namespace

void weight_product(bool trans_w, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                    const float* w, int64_t ldw, float* c, int64_t ldc,
                    const std::function<void(int64_t, int64_t, int64_t, int64_t)>& epilogue) {
  if (!packed_gemm_applies(m, n, k)) {
    parallel_sgemm(false, trans_w, m, n, k, 1.0f, a, lda, w, ldw, 0.0f, c, ldc, epilogue);
    return;
  }
  constexpr int64_t kMinTiles = 4, kMinTileRows = 64;
  const int64_t tiles = std::max((m + kPackedGemmRows - 1) / kPackedGemmRows,
                                 std::min(kMinTiles, m / kMinTileRows));
  const int64_t rows = (m + tiles - 1) / tiles;
  const std::shared_ptr<const PackedGemmB> packed = packed_weight(trans_w, k, n, w, ldw);
  parallel_for((m + rows - 1) / rows, [&](int64_t t) {
    const int64_t i0 = t * rows, i1 = std::min(m, i0 + rows);
    sgemm_packed(i1 - i0, a + i0 * lda, lda, *packed, c + i0 * ldc, ldc);
    if (epilogue) epilogue(i0, i1, 0, n);
  });
}

}  // namespace attnkit::nn
