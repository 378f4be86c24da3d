#pragma once
// Softmax cross-entropy over a vocabulary, and the fused LM head + loss that never materialises
// the [T, V] logits.
//   loss_t = lse_t - z_t[target_t], lse_t = log Σ_v exp(z_t[v]);  loss = Σ_valid loss_t / n_valid
// A negative target means "ignore" (PyTorch's ignore_index = -100): the token contributes no loss
// and gets zero gradient; n_valid counts the others. With n_valid = 0 the mean loss is 0 and every
// gradient is 0 (PyTorch returns NaN there).
// PyTorch: torch.nn.functional.cross_entropy(z, targets, ignore_index=-100) with z = logits, or
// z = h @ W.T + b for the fused form.
//
// Shapes: logits, d_logits [T, V]; h, d_h [T, C]; W, d_W [V, C] (Hugging Face layout: the tied
// token embedding or lm_head.weight); b, d_b [V] or empty (BERT's MLM decoder has a bias);
// targets [T] (int32, < V); losses, lse [T] (per-token loss and logsumexp; 0 for ignored tokens).
// A target >= V throws attnkit::Error naming its index.
// Gradient contract (docs/architecture.md): *_backward ADDS (+=) into parameter gradients (d_W,
// d_b) and ASSIGNS (=) input gradients (d_h, d_logits).
// Fused schedule: the vocabulary is processed in chunks of kVocabChunk rows of W with an online
// logsumexp; the backward recomputes each chunk's logits from lse. Extra memory: the valid rows
// of h and d_h (2·n_valid·C floats) and one chunk of logits (n_valid·kVocabChunk floats).
// All results are bitwise identical for any thread count.
// Reference: cross_entropy_reference.cpp (double), same signatures.
#include <cstdint>
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct CrossEntropyTiles {                      // fused-path tile sizes
  static constexpr int64_t kVocabChunk = 2048;  // vocabulary rows of W per chunk
  static constexpr int64_t kTokenTile = 64;     // tokens per parallel task
};

// Per-token losses[T] and lse[T] of logits[T, V]; returns the mean loss over valid tokens.
float cross_entropy_forward(std::span<float> losses, std::span<float> lse, ConstView2 logits,
                            std::span<const int32_t> targets);
// d_logits[T, V] = (softmax(logits) - onehot(target))·d_loss/n_valid (assigned; 0 on ignored
// rows), from the forward's lse; d_logits may alias logits.
void cross_entropy_backward(View2 d_logits, ConstView2 logits, std::span<const int32_t> targets,
                            std::span<const float> lse, float d_loss);

// Fused LM head + loss: per-token losses[T] and lse[T] of z = h·Wᵀ + b without storing z;
// returns the mean loss over valid tokens.
float linear_cross_entropy_forward(std::span<float> losses, std::span<float> lse, ConstView2 h,
                                   ConstView2 w, std::span<const float> b,
                                   std::span<const int32_t> targets);
// With dz = (softmax(z) - onehot)·d_loss/n_valid recomputed chunk by chunk from lse:
// d_h[T, C] = dz·W (assigned), d_w[V, C] += dzᵀ·h, d_b[V] += Σ_t dz (skipped if empty).
void linear_cross_entropy_backward(View2 d_h, View2 d_w, std::span<float> d_b, ConstView2 h,
                                   ConstView2 w, std::span<const float> b,
                                   std::span<const int32_t> targets, std::span<const float> lse,
                                   float d_loss);

// Inference logits[T, V] = h[T, C]·w[V, C]ᵀ + b[V] (b may be empty); the same GEMM as linear.
void logits_forward(View2 logits, ConstView2 h, ConstView2 w, std::span<const float> b);

// References with the same contracts as the functions above.
float cross_entropy_forward_reference(std::span<float> losses, std::span<float> lse,
                                      ConstView2 logits, std::span<const int32_t> targets);
void cross_entropy_backward_reference(View2 d_logits, ConstView2 logits,
                                      std::span<const int32_t> targets, std::span<const float> lse,
                                      float d_loss);
float linear_cross_entropy_forward_reference(std::span<float> losses, std::span<float> lse,
                                             ConstView2 h, ConstView2 w, std::span<const float> b,
                                             std::span<const int32_t> targets);
void linear_cross_entropy_backward_reference(View2 d_h, View2 d_w, std::span<float> d_b,
                                             ConstView2 h, ConstView2 w, std::span<const float> b,
                                             std::span<const int32_t> targets,
                                             std::span<const float> lse, float d_loss);
void logits_forward_reference(View2 logits, ConstView2 h, ConstView2 w, std::span<const float> b);

}  // namespace attnkit
