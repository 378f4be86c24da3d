#pragma once
// Exact attention, tiled with an online softmax (FlashAttention-2 schedule) on the CPU.
// Same result as attention_reference (softmax(scale·q·kᵀ + mask)·v with sinks, softcap, dropout)
// up to float32 rounding, without ever materialising the Tq×Tk score matrix: extra memory is
// O(tile) per thread plus O(H·Tq) floats in the backward.
//
// Schedule: the G query heads of a KV group are stacked into one tile (rows = query positions ×
// G, position-major), so each K/V tile is read once per group and the GEMMs are G times taller.
// Key tiles outside the mask are skipped; tiles crossing the mask edge are cut into sub-blocks of
// kDiagonalBlock positions (12 on the packed path), each multiplied only against the keys it can
// see.
#include <cstdint>

#include "attnkit/attention/attention.hpp"
#include "attnkit/core/scoped_setting.hpp"

namespace attnkit {

struct FlashTiles {                                // tile sizes, in tokens
  static constexpr int64_t kRowsPerTile = 512;     // stacked rows (positions × G) in a query tile
  static constexpr int64_t kMaxQueryTile = 256;     // query positions per tile, at most
  static constexpr int64_t kKeyTile = 512;          // keys per forward key tile
  static constexpr int64_t kDiagonalBlock = 32;     // positions per sub-block on the mask edge
  static constexpr int64_t kBwdRowsPerTile = 256;   // stacked rows per backward query tile
  static constexpr int64_t kBwdKeyTile = 128;       // keys per backward key tile
  static_assert(kDiagonalBlock <= kMaxQueryTile && kKeyTile % 8 == 0 && kBwdKeyTile % 8 == 0);
};

// The forward's tile products S = Q·Kᵀ and O += P·V: attnkit's register-blocked kernels on K and
// V packed once per (sequence, KV head), or OpenBLAS sgemm on each tile. automatic = packed: it
// measured faster at every head dimension tried (docs/performance-data.md).
enum class FlashProducts { automatic, packed, blas };

// The tile products the calling thread's forwards use (automatic unless forced).
FlashProducts flash_products();
// Forces the calling thread's tile products (automatic restores the default choice).
void set_flash_products(FlashProducts p);
// Forces the forward's tile products on the calling thread while the scope lives (tests and
// benchmarks run both paths on one shape).
using FlashProductsScope = ScopedSetting<FlashProducts, flash_products, set_flash_products>;

// Forward: fills args.out [Tq, H, D] and, if given, args.lse [H, Tq] (needed by the backward).
// Parallel over (sequence, KV head, query tile); bitwise identical for any thread count. The
// packed path keeps its packed K and V buffer (about the size of K and V, at most 128 MiB at a
// time) per calling thread between calls. NaN or inf in q, k or v throws attnkit::Error naming
// the first such element; the packed path finds them while packing, so out and lse may have been
// written when it throws.
void flash_attention(const AttentionOptions& opts, const AttentionArgs& args);

// Backward from args.out and args.lse of the forward: assigns grads.d_q, d_k, d_v and d_sink.
// dK/dV are accumulated per KV head over its group with no H-sized temporary. Bitwise identical
// for any thread count (the schedule depends only on the shape). NaN or inf in q, k, v or d_out
// throws attnkit::Error naming the first such element; the fused packed schedule finds them while
// packing, so the gradients may have been written when it throws.
void flash_attention_backward(const AttentionOptions& opts, const AttentionArgs& args,
                              const AttentionGrads& grads);

}  // namespace attnkit
