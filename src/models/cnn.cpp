// CnnModel: parameter layout, initialisation, forward and backward (see models/cnn.hpp).
#include "attnkit/models/cnn.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/batch_norm2d.hpp"
#include "attnkit/nn/cbam.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "attnkit/nn/global_pool.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/parallel_blocks.hpp"  // element-wise passes in fixed blocks
#include "attnkit/nn/pool2d.hpp"
#include "attnkit/nn/se_block.hpp"

namespace attnkit {

// Saved batch-norm statistics of one forward. (Outside the anonymous namespace: CnnStage below,
// which has external linkage, holds it.)
struct CnnBnStats {
  std::vector<float> mean, rstd;
  void resize(int64_t c) { mean.assign(size_t(c), 0.0f), rstd.assign(size_t(c), 0.0f); }
};

namespace {

using T4 = Tensor<float, 4>;
using T2 = Tensor<float, 2>;

// d ← d where y > 0, else 0 (y is the ReLU's output).
void relu_backward_inplace(T4& d, const T4& y) {
  float* g = d.data();
  const float* o = y.data();
  nn::parallel_rows(d.numel(), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) g[i] = o[i] > 0.0f ? g[i] : 0.0f;
  });
}
void add_into(T4& a, const T4& b) {
  float* p = a.data();
  const float* q = b.data();
  nn::parallel_rows(a.numel(), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) p[i] += q[i];
  });
}
// o = max(a + b, 0).
void add_relu(T4& o, const T4& a, const T4& b) {
  float* r = o.data();
  const float *p = a.data(), *q = b.data();
  nn::parallel_rows(o.numel(), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) r[i] = std::max(p[i] + q[i], 0.0f);
  });
}

View4 as4(std::span<float> s, int64_t a, int64_t b, int64_t c, int64_t d) {
  return View4::contiguous(s.data(), {a, b, c, d});
}
View2 as2(std::span<float> s, int64_t a, int64_t b) { return View2::contiguous(s.data(), {a, b}); }

// The SE / CBAM channel-gate MLP of a stage (ids.fc1 [hidden, c], ids.fc2 [c, hidden]) and its
// gradients, as views into the store.
template <class StageIds>
SeWeights channel_mlp(ParameterStore& s, const StageIds& ids, int64_t c, int64_t hidden) {
  return {as2(s.parameter(ids.fc1.weight), hidden, c), s.parameter(ids.fc1.bias),
          as2(s.parameter(ids.fc2.weight), c, hidden), s.parameter(ids.fc2.bias)};
}
template <class StageIds>
SeGrads channel_mlp_grads(ParameterStore& s, const StageIds& ids, int64_t c, int64_t hidden) {
  return {as2(s.grad_vec(ids.fc1.weight), hidden, c), s.grad_vec(ids.fc1.bias),
          as2(s.grad_vec(ids.fc2.weight), c, hidden), s.grad_vec(ids.fc2.bias)};
}

// Gives t the shape [n, c, h, w], reallocating only when the shape changes (every user
// overwrites the whole tensor).
void ensure(T4& t, int64_t n, int64_t c, int64_t h, int64_t w) {
  const std::array<int64_t, 4> shape{n, c, h, w};
  if (t.shape() != shape) t = T4(shape);
}

}  // namespace

// Activations of one stage (or the stem: c1/h1 and pooling only).
struct CnnStage {
  int64_t in_c = 0, out_c = 0, size = 0;  // input channels, output channels, spatial side
  bool project = false, pool = false;
  T4 c1, h1, c2, r, att, scc, scn, o, pooled;
  CnnBnStats bn1, bn2, bnsc;
  std::vector<int32_t> argmax;
  std::vector<float> scale_shift;  // the stem's batch-norm map for the fused pool: scale[C], shift[C]
  SeCache se;
  CbamCache cbam;
  // backward scratch
  T4 d_o, d_r, d_h1, d_in, d_tmp;  // batch norms' backward runs in place (d_x over d_y)
};

class CnnActivations {
 public:
  int64_t n = 0;
  T4 x;                        // copy of the input (the stem's conv needs it for d_w)
  CnnStage stem;               // c1 = conv, h1 = BN + ReLU, pooled
  std::vector<CnnStage> stages;
  T2 features, logits;         // [N, w_last], [N, K]
  T2 d_features;
  bool has_forward = false;
  bool training = false;
};

CnnModel::CnnModel(const CnnConfig& config) : ConfiguredImageClassifier("CnnModel", config) {
  validate(config_);
  build_layout();
}
CnnModel::~CnnModel() = default;

ImageShape CnnModel::input_shape() const {
  return {config_.num_channels, config_.image_size, config_.image_size};
}

void CnnModel::build_layout() {
  auto add = [&](const std::string& name, std::vector<int64_t> shape) { store_.add(name, std::move(shape)); };
  const auto& w = config_.widths;
  add("stem.conv.weight", {w[0], config_.num_channels, 3, 3});
  store_.add_batch_norm("stem.bn", w[0]);
  for (size_t i = 1; i < w.size(); ++i) {
    const std::string p = "stages." + std::to_string(i) + ".";
    add(p + "conv1.weight", {w[i], w[i - 1], 3, 3});
    store_.add_batch_norm(p + "bn1", w[i]);
    add(p + "conv2.weight", {w[i], w[i], 3, 3});
    store_.add_batch_norm(p + "bn2", w[i]);
    const int64_t hidden = std::max<int64_t>(1, w[i] / config_.reduction);
    if (config_.attention != ChannelAttention::kNone) {
      const std::string a = p + (config_.attention == ChannelAttention::kSe ? "se." : "cbam.");
      store_.add_linear(a + "fc1", hidden, w[i]);
      store_.add_linear(a + "fc2", w[i], hidden);
      if (config_.attention == ChannelAttention::kCbam) {
        add(a + "spatial.weight", {1, 2, config_.spatial_kernel, config_.spatial_kernel});
        add(a + "spatial.bias", {1});
      }
    }
    if (w[i] != w[i - 1]) {
      add(p + "shortcut.conv.weight", {w[i], w[i - 1], 1, 1});
      store_.add_batch_norm(p + "shortcut.bn", w[i]);
    }
  }
  store_.add_linear("fc", config_.num_labels, w.back());
  store_.allocate();
  const auto& s = store_;
  stages_.push_back({.conv1 = s.id("stem.conv.weight"), .bn1 = s.batch_norm("stem.bn")});
  for (size_t i = 1; i < w.size(); ++i) {
    const std::string p = "stages." + std::to_string(i) + ".";
    const std::string a = p + (config_.attention == ChannelAttention::kSe ? "se." : "cbam.");
    const bool project = w[i] != w[i - 1];
    stages_.push_back({.conv1 = s.id(p + "conv1.weight"),
                       .conv2 = s.id(p + "conv2.weight"),
                       .shortcut_conv = s.find(p + "shortcut.conv.weight"),
                       .bn1 = s.batch_norm(p + "bn1"),
                       .bn2 = s.batch_norm(p + "bn2"),
                       .shortcut_bn = project ? s.batch_norm(p + "shortcut.bn") : BatchNormIds{},
                       .fc1 = s.find_layer(a + "fc1"),
                       .fc2 = s.find_layer(a + "fc2"),
                       .spatial = s.find_layer(a + "spatial")});
  }
  fc_ = s.layer("fc");
}

void CnnModel::init_random(uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (const auto& p : store_.info()) {
    float* x = store_.parameters().data() + p.offset;
    const bool conv = p.shape.size() == 4 && !p.name.ends_with("spatial.weight");
    const bool bn = p.name.find(".bn") != std::string::npos || p.name.find("bn.") != std::string::npos;
    if (bn) {
      std::fill_n(x, p.numel, p.name.ends_with(".weight") ? 1.0f : 0.0f);
    } else if (conv) {  // kaiming_normal_(mode="fan_out", nonlinearity="relu")
      const double fan_out = double(p.shape[0] * p.shape[2] * p.shape[3]);
      std::normal_distribution<float> normal(0.0f, float(std::sqrt(2.0 / fan_out)));
      for (int64_t i = 0; i < p.numel; ++i) x[i] = normal(rng);
    } else {  // torch.nn.Linear / Conv2d default: U(±1/sqrt(fan_in)) for weight and bias
      const ParameterInfo& wi = p.name.ends_with(".bias")
                                    ? store_.info(p.name.substr(0, p.name.size() - 4) + "weight")
                                    : p;
      int64_t fan_in = 1;
      for (size_t d = 1; d < wi.shape.size(); ++d) fan_in *= wi.shape[d];
      const float bound = float(1.0 / std::sqrt(double(fan_in)));
      std::uniform_real_distribution<float> uni(-bound, bound);
      for (int64_t i = 0; i < p.numel; ++i) x[i] = uni(rng);
    }
  }
  store_.reset_buffers();
}

ConstView2 CnnModel::forward(ConstView4 x) {
  const auto& w = config_.widths;
  const int64_t n = x.shape[0];
  check(n >= 1, "CnnModel.forward: x: expected at least one image");
  check(x.shape[1] == config_.num_channels && x.shape[2] == config_.image_size &&
            x.shape[3] == config_.image_size,
        "CnnModel.forward: x: expected [N, ", config_.num_channels, ", ", config_.image_size, ", ",
        config_.image_size, "], got [", x.shape[0], ", ", x.shape[1], ", ", x.shape[2], ", ",
        x.shape[3], "]");
  check(x.stride[3] == 1 && x.stride[2] == x.shape[3] && x.stride[1] == x.shape[2] * x.shape[3] &&
            x.stride[0] == x.shape[1] * x.shape[2] * x.shape[3],
        "CnnModel.forward: x must be contiguous NCHW");
  if (!acts_ || acts_->n != n) {
    acts_ = std::make_unique<CnnActivations>();
    acts_->n = n;
  }
  CnnActivations& a = *acts_;
  a.training = training_;
  const BatchNormOptions bno{.eps = float(config_.batch_norm_eps),
                             .momentum = float(config_.batch_norm_momentum),
                             .training = training_};
  auto bn = [&](T4& y, CnnBnStats& st, const T4& in, const BatchNormIds& ids, bool relu = false) {
    st.resize(in.shape()[1]);
    BatchNormOptions o = bno;
    o.relu = relu;
    batch_norm2d_forward(y.view(), st.mean, st.rstd, store_.buffer(ids.running_mean),
                         store_.buffer(ids.running_var), in.view(), param(ids.affine.weight),
                         param(ids.affine.bias), o);
  };
  const Pool2dOptions pool{.kernel = 2};

  // Stem.
  int64_t s = config_.image_size;
  CnnStage& st = a.stem;
  st.in_c = config_.num_channels, st.out_c = w[0], st.size = s, st.pool = true;
  ensure(a.x, n, config_.num_channels, s, s);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < x.shape[1]; ++c)
      for (int64_t h = 0; h < s; ++h)
        std::copy_n(x.ptr(i, c, h), s, a.x.view().ptr(i, c, h));
  ensure(st.c1, n, w[0], s, s);
  conv2d_forward(st.c1.view(), a.x.view(), as4(param(stages_[0].conv1), w[0], st.in_c, 3, 3), {},
                 {.stride = 1, .padding = 1});
  // Batch norm + ReLU + max pool: the statistics, then the pool reads c1 once more and applies the
  // batch norm's map and the ReLU plane by plane, so the largest activation of the network
  // (relu(bn(c1))) is never stored. The backward needs only c1 and the pool's argmax.
  st.bn1.resize(w[0]);
  batch_norm2d_forward(View4{}, st.bn1.mean, st.bn1.rstd, store_.buffer(stages_[0].bn1.running_mean),
                       store_.buffer(stages_[0].bn1.running_var), st.c1.view(),
                       param(stages_[0].bn1.affine.weight), param(stages_[0].bn1.affine.bias), bno);
  std::vector<float>& scale = st.scale_shift;
  scale.resize(size_t(2 * w[0]));
  const std::span<float> sc(scale.data(), size_t(w[0])), sh(scale.data() + w[0], size_t(w[0]));
  batch_norm2d_scale_shift(sc, sh, st.bn1.mean, st.bn1.rstd, param(stages_[0].bn1.affine.weight),
                           param(stages_[0].bn1.affine.bias));
  s /= 2;
  ensure(st.pooled, n, w[0], s, s);
  st.argmax.resize(size_t(n * w[0] * s * s));  // every entry is written by the pool
  max_pool2d_affine_relu_forward(st.pooled.view(), st.argmax, st.c1.view(), sc, sh, pool);
  const T4* in = &st.pooled;

  a.stages.resize(w.size() - 1);
  for (size_t i = 1; i < w.size(); ++i) {
    CnnStage& g = a.stages[i - 1];
    const StageIds& ids = stages_[i];
    g.in_c = w[i - 1], g.out_c = w[i], g.size = s;
    g.project = w[i] != w[i - 1];
    g.pool = i + 1 < w.size();
    const int64_t c = w[i];
    ensure(g.c1, n, c, s, s), ensure(g.h1, n, c, s, s), ensure(g.c2, n, c, s, s);
    ensure(g.r, n, c, s, s);
    conv2d_forward(g.c1.view(), in->view(), as4(param(ids.conv1), c, g.in_c, 3, 3), {},
                   {.stride = 1, .padding = 1});
    bn(g.h1, g.bn1, g.c1, ids.bn1, /*relu=*/true);
    conv2d_forward(g.c2.view(), g.h1.view(), as4(param(ids.conv2), c, c, 3, 3), {},
                   {.stride = 1, .padding = 1});
    bn(g.r, g.bn2, g.c2, ids.bn2);
    const T4* branch = &g.r;
    const int64_t hidden = std::max<int64_t>(1, c / config_.reduction);
    if (config_.attention == ChannelAttention::kSe) {
      ensure(g.att, n, c, s, s);
      se_block_forward(g.att.view(), g.se, g.r.view(), channel_mlp(store_, ids, c, hidden));
      branch = &g.att;
    } else if (config_.attention == ChannelAttention::kCbam) {
      // CBAM's last product x1 ⊙ a_s is made in the residual add below (cbam_residual_relu).
      const int64_t k = config_.spatial_kernel;
      cbam_forward(View4{}, g.cbam, g.r.view(),
                   CbamWeights{channel_mlp(store_, ids, c, hidden),
                               as4(param(ids.spatial.weight), 1, 2, k, k), param(ids.spatial.bias)});
      branch = nullptr;
    }
    const T4* shortcut = in;
    if (g.project) {
      ensure(g.scc, n, c, s, s), ensure(g.scn, n, c, s, s);
      conv2d_forward(g.scc.view(), in->view(), as4(param(ids.shortcut_conv), c, g.in_c, 1, 1),
                     {}, {});
      bn(g.scn, g.bnsc, g.scc, ids.shortcut_bn);
      shortcut = &g.scn;
    }
    if (g.pool) {
      // o = max(branch + shortcut, 0) feeds only the pool (the backward masks by the pooled
      // values), so it is made plane by plane where the pool reads it and never stored.
      const int64_t side = s, hw = s * s;
      const float* sc = shortcut->data();
      auto make_o = [&](int64_t pl, float* out) {
        const float* q = sc + pl * hw;
        if (branch) {
          const float* p = branch->data() + pl * hw;
          for (int64_t j = 0; j < hw; ++j) out[j] = std::max(p[j] + q[j], 0.0f);
        } else {  // CBAM's output x1 ⊙ a_s, as cbam_residual_relu
          const float* x1 = g.cbam.x1.data() + pl * hw;
          const float* as = g.cbam.spatial_gate.data() + (pl / c) * hw;
          for (int64_t j = 0; j < hw; ++j) out[j] = std::max(x1[j] * as[j] + q[j], 0.0f);
        }
      };
      s /= 2;
      ensure(g.pooled, n, c, s, s);
      g.argmax.resize(size_t(n * c * s * s));  // every entry is written by the pool
      max_pool2d_forward_of(g.pooled.view(), g.argmax, {n, c, side, side}, pool, make_o);
      in = &g.pooled;
    } else {
      ensure(g.o, n, c, s, s);
      if (branch) add_relu(g.o, *branch, *shortcut);
      else cbam_residual_relu(g.o.view(), g.cbam, shortcut->view());
      in = &g.o;
    }
  }
  // Head.
  const int64_t cl = w.back();
  a.features = T2({n, cl});
  global_avg_pool_forward(a.features.view(), in->view());
  a.logits = T2({n, config_.num_labels});
  linear_forward(a.logits.view(), a.features.view(), as2(param(fc_.weight), config_.num_labels, cl),
                 param(fc_.bias));
  a.has_forward = true;
  return a.logits.view();
}

void CnnModel::backward(ConstView2 d_logits) {
  check(acts_ && acts_->has_forward, "CnnModel.backward: call forward() first");
  CnnActivations& a = *acts_;
  const int64_t n = a.n;
  const int64_t k = config_.num_labels;
  check(d_logits.shape[0] == n && d_logits.shape[1] == k, "CnnModel.backward: d_logits: expected [",
        n, ", ", k, "], got [", d_logits.shape[0], ", ", d_logits.shape[1], "]");
  const auto& w = config_.widths;
  const BatchNormOptions bno{.eps = float(config_.batch_norm_eps),
                             .momentum = float(config_.batch_norm_momentum),
                             .training = a.training};
  // relu: the forward fused the ReLU (d_y is the gradient of its output); the backward masks.
  auto bn_back = [&](T4& d_x, const T4& d_y, const T4& x, const CnnBnStats& st,
                     const BatchNormIds& ids, bool relu = false) {
    BatchNormOptions o = bno;
    o.relu = relu;
    batch_norm2d_backward(d_x.view(), grad_vec(ids.affine.weight), grad_vec(ids.affine.bias), d_y.view(),
                          x.view(), param(ids.affine.weight), param(ids.affine.bias), st.mean,
                          st.rstd, o);
  };
  auto like = [](T4& t, const T4& shape_of) {
    if (t.shape() != shape_of.shape()) t = T4(shape_of.shape());
  };

  // Head.
  const int64_t cl = w.back();
  a.d_features = T2({n, cl});
  linear_backward(a.d_features.view(), as2(grad_vec(fc_.weight), k, cl), grad_vec(fc_.bias), d_logits,
                  a.features.view(), as2(param(fc_.weight), k, cl));
  CnnStage& last = a.stages.empty() ? a.stem : a.stages.back();
  T4* d_next = nullptr;  // gradient of the tensor the following layer read
  T4& last_out = a.stages.empty() ? a.stem.pooled : last.o;
  T4& d_last = a.stages.empty() ? a.stem.d_tmp : last.d_o;
  like(d_last, last_out);
  global_avg_pool_backward(d_last.view(), a.d_features.view());
  d_next = &d_last;

  for (size_t i = w.size() - 1; i >= 1; --i) {
    CnnStage& g = a.stages[i - 1];
    const StageIds& ids = stages_[i];
    const int64_t c = g.out_c;
    if (g.pool) {  // d_next is the gradient of g.pooled
      // Through the ReLU first, on the 4× smaller pooled tensor: only each window's argmax
      // receives a gradient, and there o equals the pooled value, so masking by pooled > 0
      // before the pool's backward is the ReLU's backward.
      relu_backward_inplace(*d_next, g.pooled);
      like(g.d_o, g.r);  // o's shape (o itself is not stored before a pool)
      max_pool2d_backward(g.d_o.view(), d_next->view(), g.argmax);
      d_next = &g.d_o;
    } else {
      relu_backward_inplace(*d_next, g.o);
    }
    T4& d_s = *d_next;  // the gradient of the pre-ReLU sum
    // Residual branch.
    like(g.d_r, g.r);
    const int64_t hidden = std::max<int64_t>(1, c / config_.reduction);
    if (config_.attention == ChannelAttention::kSe) {
      se_block_backward(g.d_r.view(), channel_mlp_grads(store_, ids, c, hidden), d_s.view(),
                        g.r.view(), channel_mlp(store_, ids, c, hidden), g.se);
    } else if (config_.attention == ChannelAttention::kCbam) {
      const int64_t ks = config_.spatial_kernel;
      cbam_backward(g.d_r.view(),
                    CbamGrads{channel_mlp_grads(store_, ids, c, hidden),
                              as4(grad_vec(ids.spatial.weight), 1, 2, ks, ks),
                              grad_vec(ids.spatial.bias)},
                    d_s.view(), g.r.view(),
                    CbamWeights{channel_mlp(store_, ids, c, hidden),
                                as4(param(ids.spatial.weight), 1, 2, ks, ks),
                                param(ids.spatial.bias)},
                    g.cbam);
    } else {
      std::copy_n(d_s.data(), d_s.numel(), g.d_r.data());
    }
    bn_back(g.d_r, g.d_r, g.c2, g.bn2, ids.bn2);  // now the gradient of c2
    like(g.d_h1, g.h1);
    conv2d_backward(g.d_h1.view(), as4(grad_vec(ids.conv2), c, c, 3, 3), {}, g.d_r.view(),
                    g.h1.view(), as4(param(ids.conv2), c, c, 3, 3), {.stride = 1, .padding = 1});
    bn_back(g.d_h1, g.d_h1, g.c1, g.bn1, ids.bn1, /*relu=*/true);  // now the gradient of c1
    const T4& in = i == 1 ? a.stem.pooled : a.stages[i - 2].pool ? a.stages[i - 2].pooled : a.stages[i - 2].o;
    like(g.d_in, in);
    conv2d_backward(g.d_in.view(), as4(grad_vec(ids.conv1), c, g.in_c, 3, 3), {}, g.d_h1.view(),
                    in.view(), as4(param(ids.conv1), c, g.in_c, 3, 3), {.stride = 1, .padding = 1});
    // Shortcut.
    if (g.project) {
      bn_back(d_s, d_s, g.scc, g.bnsc, ids.shortcut_bn);  // d_s's last use: now the gradient of scc
      like(g.d_tmp, in);
      conv2d_backward(g.d_tmp.view(), as4(grad_vec(ids.shortcut_conv), c, g.in_c, 1, 1), {},
                      d_s.view(), in.view(), as4(param(ids.shortcut_conv), c, g.in_c, 1, 1), {});
      add_into(g.d_in, g.d_tmp);
    } else {
      add_into(g.d_in, d_s);
    }
    d_next = &g.d_in;
  }
  // Stem: d_next is the gradient of stem.pooled.
  CnnStage& st = a.stem;
  relu_backward_inplace(*d_next, st.pooled);  // the ReLU's backward on the pooled side, as above
  like(st.d_o, st.c1);
  // The pool's backward and the batch norm's in one: the gradient of c1, the pool's scatter made
  // plane by plane where the batch norm reads it.
  const BatchNormIds& sbn = stages_[0].bn1;
  batch_norm2d_max_pool_backward(st.d_o.view(), grad_vec(sbn.affine.weight), grad_vec(sbn.affine.bias),
                                 d_next->view(), st.argmax, st.c1.view(), param(sbn.affine.weight),
                                 param(sbn.affine.bias), st.bn1.mean, st.bn1.rstd, bno);
  conv2d_backward(View4{}, as4(grad_vec(stages_[0].conv1), w[0], st.in_c, 3, 3), {}, st.d_o.view(),
                  a.x.view(), as4(param(stages_[0].conv1), w[0], st.in_c, 3, 3), {.stride = 1, .padding = 1});
}

}  // namespace attnkit
