// Private to the ViT model: the saved activations of one forward over N images (every buffer the
// backward reads), the backward's temporaries, and the dropout stream numbering.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "attnkit/models/vit.hpp"

namespace attnkit {

namespace vit_detail {
constexpr uint32_t kEmbeddingStream = 0;                                     // drop(x₀)
inline uint32_t attention_stream(int64_t l) { return uint32_t(1 + 2 * l); }  // drop(attn out)
inline uint32_t mlp_stream(int64_t l) { return uint32_t(2 + 2 * l); }        // drop(MLP out)
}  // namespace vit_detail

// One pre-LN layer over T = N·S tokens: the attention block's cache (owned here, so the block's
// backward scratch can be shared by all layers) and the MLP's saved tensors.
struct VitLayerActivations {
  VitLayerActivations(int64_t t, int64_t c, int64_t f, int64_t heads)
      : h1({t, c}), qkv({t, 3 * c}), attn({t, c}), lse({heads, t}), mid({t, c}), h2({t, c}),
        pre({t, f}), u({t, f}), mean1(size_t(t)), rstd1(size_t(t)), mean2(size_t(t)),
        rstd2(size_t(t)) {}
  AttentionBlockCache cache() { return {qkv.view(), attn.view(), lse.view(), {}, {}, {}, {}}; }

  Tensor<float, 2> h1;              // LN_before(x)                  [T, C]
  Tensor<float, 2> qkv, attn, lse;  // block cache                   [T, 3C], [T, C], [H, T]
  Tensor<float, 2> mid;             // x + drop(attn(h1))            [T, C]
  Tensor<float, 2> h2;              // LN_after(mid)                 [T, C]
  Tensor<float, 2> pre, u;          // W₁·h2 + b₁, gelu(pre)         [T, F]
  std::vector<float> mean1, rstd1, mean2, rstd2;  // [T]
};

class VitActivations {
 public:
  VitActivations(const VitConfig& cfg, int64_t images) : images(images) {
    const int64_t s = cfg.seq_len(), t = images * s, c = cfg.hidden_size;
    const int64_t f = cfg.intermediate_size, np = cfg.num_patches();
    tokens = t;
    for (int64_t i = 0; i <= images; ++i) cu.push_back(int32_t(i * s));
    patches = Tensor<float, 2>({images * np, cfg.patch_dim()});
    emb = Tensor<float, 2>({images * np, c});
    for (int64_t l = 0; l <= cfg.num_hidden_layers; ++l)
      resid.emplace_back(std::array<int64_t, 2>{t, c});
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
      layers.emplace_back(t, c, f, cfg.num_attention_heads);
    const int64_t head_rows = cfg.pooling == VitPooling::kCls ? images : t;
    final_out = Tensor<float, 2>({head_rows, c});
    final_mean.resize(size_t(head_rows));
    final_rstd.resize(size_t(head_rows));
    pooled = Tensor<float, 2>({images, c});
    logits = Tensor<float, 2>({images, cfg.num_labels});
    d_resid = Tensor<float, 2>({t, c});
    d_a = Tensor<float, 2>({t, c});
    d_h = Tensor<float, 2>({t, c});
    d_f = Tensor<float, 2>({t, f});
    d_qkv = Tensor<float, 2>({t, 3 * c});
    d_attn = Tensor<float, 2>({t, c});
    d_final = Tensor<float, 2>({head_rows, c});
    d_pooled = Tensor<float, 2>({images, c});
  }
  AttentionBlockScratch scratch() { return {d_qkv.view(), d_attn.view(), {}, {}}; }

  int64_t images = 0, tokens = 0;   // N, T = N·S
  std::vector<int32_t> cu;          // [N+1] = 0, S, 2S, ...: one attention sequence per image
  Tensor<float, 2> patches;         // patchify(x)                   [N·Np, Cin·P·P]
  Tensor<float, 2> emb;             // patches·W_pᵀ + b_p            [N·Np, C]
  std::vector<Tensor<float, 2>> resid;  // [L+1] layer inputs x_l    [T, C]
  std::vector<VitLayerActivations> layers;
  Tensor<float, 2> final_out;       // LN(x_L) of the rows the head reads ([N, C] cls, [T, C] mean)
  std::vector<float> final_mean, final_rstd;
  Tensor<float, 2> pooled, logits;  // [N, C], [N, K]
  bool has_forward = false;
  // Backward temporaries.
  Tensor<float, 2> d_resid, d_a, d_h, d_f, d_qkv, d_attn, d_final, d_pooled;
};

}  // namespace attnkit
