// AdamW, torch.optim.AdamW 1.13's single-tensor path in float32 (scalars computed in double, then
// rounded to float as ATen does for a float tensor):
//   param.mul_(1 - lr*wd); exp_avg.mul_(b1).add_(grad, alpha=1-b1)  [add_ is an FMA in ATen]
//   exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1-b2)
//   denom = exp_avg_sq.sqrt() / sqrt(1-b2^t) + eps; param.addcdiv_(exp_avg, denom, -lr/(1-b1^t))
// with the same operations, except that the addcmul_ and the addcdiv_ are each one FMA here
// (ATen may round their product first): a last-bit difference at most per step.
#include "attnkit/train/adamw.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/core/weight_pack_cache.hpp"
#include "attnkit/io/safetensors.hpp"
#include "hwy/highway.h"

namespace attnkit {
namespace {

constexpr size_t kChunk = size_t(1) << 15;  // elements per unit of parallel work

namespace hn = hwy::HWY_NAMESPACE;

// One step's scalars, rounded to float as ATen rounds them for a float tensor.
struct UpdateScalars {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias2_sqrt, eps, neg_step_size;
};

// The AdamW update of n consecutive elements, vectorised; every lane and the scalar tail run the
// same operations in the same order, so a result does not depend on where a chunk starts:
//   x ← x·decay;  m ← g·(1-b1) + m·b1 (one FMA);  v ← (1-b2)·g·g + v·b2 (one FMA);
//   x ← neg_step·(m / (sqrt(v)/bias2_sqrt + eps)) + x (one FMA).
void update(const UpdateScalars& k, float* __restrict x, float* __restrict m, float* __restrict v,
            const float* __restrict g, size_t n) {
  using D = hn::ScalableTag<float>;
  const D d;
  const size_t lanes = hn::Lanes(d);
  const auto decay = hn::Set(d, k.decay), b1 = hn::Set(d, k.beta1), omb1 = hn::Set(d, k.one_minus_beta1);
  const auto b2 = hn::Set(d, k.beta2), omb2 = hn::Set(d, k.one_minus_beta2);
  const auto b2s = hn::Set(d, k.bias2_sqrt), eps = hn::Set(d, k.eps), step = hn::Set(d, k.neg_step_size);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto gi = hn::LoadU(d, g + i);
    const auto mi = hn::MulAdd(gi, omb1, hn::Mul(hn::LoadU(d, m + i), b1));
    const auto vi = hn::MulAdd(hn::Mul(omb2, gi), gi, hn::Mul(hn::LoadU(d, v + i), b2));
    const auto denom = hn::Add(hn::Div(hn::Sqrt(vi), b2s), eps);
    hn::StoreU(mi, d, m + i);
    hn::StoreU(vi, d, v + i);
    hn::StoreU(hn::MulAdd(step, hn::Div(mi, denom), hn::Mul(hn::LoadU(d, x + i), decay)), d, x + i);
  }
  for (; i < n; ++i) {
    m[i] = std::fma(g[i], k.one_minus_beta1, m[i] * k.beta1);
    v[i] = std::fma(k.one_minus_beta2 * g[i], g[i], v[i] * k.beta2);
    const float denom = std::sqrt(v[i]) / k.bias2_sqrt + k.eps;
    x[i] = std::fma(k.neg_step_size, m[i] / denom, x[i] * k.decay);
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

bool is_bias_or_norm(std::string_view name) {
  const size_t dot = name.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? name : name.substr(dot + 1);
  if (last == "bias") return true;
  if (lower(name).find("norm") != std::string::npos) return true;
  for (size_t pos = 0; pos < name.size();) {
    if (name.substr(pos, 3) == "ln_") return true;
    const size_t next = name.find('.', pos);
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return false;
}

AdamW::AdamW(std::vector<NamedParameter> params, const AdamWOptions& options,
             const NoDecayPredicate& no_decay)
    : params_(std::move(params)), options_(options) {
  const auto& o = options_;
  check(o.beta1 >= 0 && o.beta1 < 1, "AdamWOptions.beta1: expected [0, 1), got ", o.beta1);
  check(o.beta2 >= 0 && o.beta2 < 1, "AdamWOptions.beta2: expected [0, 1), got ", o.beta2);
  check(std::isfinite(o.eps) && o.eps >= 0, "AdamWOptions.eps: expected finite and >= 0, got ", o.eps);
  check(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
        "AdamWOptions.weight_decay: expected finite and >= 0, got ", o.weight_decay);
  std::set<std::string, std::less<>> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const NamedParameter& p = params_[i];
    check(!p.name.empty(), "AdamW: params[", i, "]: empty name");
    check(seen.insert(p.name).second, "AdamW: params[", i, "]: duplicate name \"", p.name, "\"");
    check(p.value.size() == p.grad.size(), "AdamW: parameter \"", p.name, "\": grad has ",
          p.grad.size(), " elements, value has ", p.value.size());
    decays_.push_back(no_decay && no_decay(p.name) ? 0 : 1);
    exp_avg_.emplace_back(p.value.size(), 0.0f);
    exp_avg_sq_.emplace_back(p.value.size(), 0.0f);
    for (size_t b = 0; b < p.value.size(); b += kChunk)
      chunks_.push_back({i, b, std::min(b + kChunk, p.value.size())});
  }
}

void AdamW::set_step_count(int64_t step) {
  check(step >= 0, "AdamW::set_step_count: step must be >= 0, got ", step);
  step_ = step;
}

void AdamW::step(double lr) {
  check(std::isfinite(lr) && lr >= 0, "AdamW::step: lr must be finite and >= 0, got ", lr);
  check(current_weight_pack_cache() == nullptr,
        "AdamW::step: a weight pack scope is open on this thread; end it (after the step's forward and "
        "backward) before the update, or the packed weights would go stale");
  check(step_ < std::numeric_limits<int64_t>::max(), "AdamW::step: the step count is at its maximum");
  ++step_;
  const auto& o = options_;
  const double t = double(step_);
  const float beta1 = float(o.beta1), one_minus_beta1 = float(1 - o.beta1);
  const float beta2 = float(o.beta2), one_minus_beta2 = float(1 - o.beta2);
  const float decay_factor = float(1 - lr * o.weight_decay);
  const float bias2_sqrt = float(std::sqrt(1 - std::pow(o.beta2, t)));
  const float neg_step_size = float(-(lr / (1 - std::pow(o.beta1, t))));
  const float eps = float(o.eps);
  parallel_for(int64_t(chunks_.size()), [&](int64_t c) {
    const Chunk& ch = chunks_[size_t(c)];
    const NamedParameter& p = params_[ch.param];
    const UpdateScalars k{decays_[ch.param] != 0 ? decay_factor : 1.0f, beta1, one_minus_beta1, beta2,
                          one_minus_beta2, bias2_sqrt, eps, neg_step_size};
    update(k, p.value.data() + ch.begin, exp_avg_[ch.param].data() + ch.begin,
           exp_avg_sq_[ch.param].data() + ch.begin, p.grad.data() + ch.begin, ch.end - ch.begin);
  });
}

std::vector<OptimizerStateTensor> AdamW::state() {
  std::vector<OptimizerStateTensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.push_back({params_[i].name + ".exp_avg", exp_avg_[i]});
    out.push_back({params_[i].name + ".exp_avg_sq", exp_avg_sq_[i]});
  }
  return out;
}

void AdamW::save_state(const std::string& path) const {
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t n = int64_t(exp_avg_[i].size());
    tensors.push_back({params_[i].name + ".exp_avg", DType::f32, {n},
                       std::as_bytes(std::span<const float>(exp_avg_[i]))});
    tensors.push_back({params_[i].name + ".exp_avg_sq", DType::f32, {n},
                       std::as_bytes(std::span<const float>(exp_avg_sq_[i]))});
  }
  save_safetensors(path, tensors, {{"step", std::to_string(step_)}, {"optimizer", "AdamW"}});
}

void AdamW::load_state(const std::string& path) {
  const SafetensorsFile file(path);
  const auto step_it = file.metadata().find("step");
  check(step_it != file.metadata().end(), path, ": no \"step\" in the metadata");
  int64_t step = -1;
  try {
    size_t used = 0;
    step = std::stoll(step_it->second, &used);
    check(used == step_it->second.size(), "");
  } catch (const std::exception&) {
    step = -1;
  }
  check(step >= 0, path, ": metadata step \"", step_it->second, "\" is not an integer >= 0");
  // Validate everything before changing anything.
  std::vector<const TensorInfo*> found;
  for (size_t i = 0; i < params_.size(); ++i)
    for (const char* suffix : {".exp_avg", ".exp_avg_sq"}) {
      const std::string name = params_[i].name + suffix;
      const TensorInfo* info = file.find(name);
      check(info != nullptr, path, ": missing tensor \"", name, "\"");
      check(info->dtype == DType::f32, path, ": tensor \"", name, "\": expected F32");
      check(info->numel() == int64_t(params_[i].value.size()), path, ": tensor \"", name,
            "\": expected ", params_[i].value.size(), " elements, got ", info->numel());
      found.push_back(info);
    }
  for (size_t i = 0; i < params_.size(); ++i) {
    std::memcpy(exp_avg_[i].data(), file.bytes(*found[2 * i]).data(), found[2 * i]->nbytes());
    std::memcpy(exp_avg_sq_[i].data(), file.bytes(*found[2 * i + 1]).data(),
                found[2 * i + 1]->nbytes());
  }
  step_ = step;
}

}  // namespace attnkit
