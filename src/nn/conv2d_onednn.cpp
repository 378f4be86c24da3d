// conv2d by oneDNN's direct convolution (forward, backward data, backward weights), for the layer
// classes where it measured faster than im2col + sgemm and Winograd (onednn_applies; the figures
// are in docs/performance.md). The primitive chooses its own activation and weight layouts
// (format_tag::any, blocked such as nChw16c on AVX-512); NCHW chunks are reordered into them and
// the result back.
//
// Threads and determinism: images are split into fixed chunks (a function of N and the geometry
// only) that attnkit's parallel_for hands out; each chunk runs one oneDNN primitive created for
// one thread and executed under OpenMpThreadsScope(1), so oneDNN never opens OpenMP regions of
// its own and the process uses exactly num_threads() threads, whatever OpenMP's global default
// is. d_w runs one primitive call per fixed group of images (kWeightGradientImages, a function of N
// only), each into its own partial, then adds the partials in group order, as the column path
// does with its groups: every result is bitwise identical for any thread count.
//
// Primitives (and their reorders) are cached per (pass, chunk geometry, precision): none is created
// per call once a shape has been seen.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "conv2d_common.hpp"

#if ATTNKIT_HAVE_DNNL
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <dnnl.hpp>

#include "ops/onednn_runtime.hpp"
#endif

namespace attnkit {
namespace {

// -1 = not read yet; else a Conv2dEngine.
std::atomic<int> g_engine{-1};

Conv2dEngine engine_from_environment() {
  const char* env = std::getenv("ATTNKIT_CONV_ENGINE");
  if (env == nullptr) return Conv2dEngine::kAuto;
  const std::string_view v(env);
  if (v == "builtin") return Conv2dEngine::kBuiltin;
  if (v == "onednn" && conv2d_has_onednn()) return Conv2dEngine::kOneDnn;
  return Conv2dEngine::kAuto;
}

}  // namespace

bool conv2d_has_onednn() { return ATTNKIT_HAVE_DNNL != 0; }

Conv2dEngine conv2d_engine() {
  int e = g_engine.load();
  if (e < 0) {
    int unset = -1;
    g_engine.compare_exchange_strong(unset, int(engine_from_environment()));
    e = g_engine.load();
  }
  return Conv2dEngine(e);
}

void set_conv2d_engine(Conv2dEngine engine) {
  check(engine != Conv2dEngine::kOneDnn || conv2d_has_onednn(),
        "set_conv2d_engine: oneDNN: attnkit was built without it (CMake ATTNKIT_WITH_DNNL, libdnnl-dev)");
  g_engine.store(int(engine));
}

namespace nn {

#if !ATTNKIT_HAVE_DNNL

bool onednn_applies(ConvPass, const Conv2dGeometry&) { return false; }
void onednn_conv_forward(View4, ConstView4, const float*, const Conv2dGeometry&) {
  fail("conv2d: built without oneDNN");
}
void onednn_conv_backward_data(View4, ConstView4, const float*, const Conv2dGeometry&) {
  fail("conv2d: built without oneDNN");
}
void onednn_conv_backward_weights(View4, ConstView4, ConstView4, const Conv2dGeometry&) {
  fail("conv2d: built without oneDNN");
}

#else

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using onednn::cpu_engine;
using onednn::thread_stream;

// oneDNN's right padding: what makes its output size equal attnkit's (floor) output size.
int64_t right_padding(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad) {
  return (out - 1) * stride + kernel - in - pad;
}

// 64-byte aligned per-thread buffers: oneDNN's blocked layouts (0-2) and its scratchpad (3).
onednn::AlignedSlot& slot(int which) {
  thread_local onednn::AlignedSlot slots[4];
  return slots[which];
}

// A plain-layout (NCHW / OIHW) operand of a primitive and, when the primitive chose another layout,
// the reorder between the two (into the primitive for inputs, out of it for outputs).
struct Operand {
  memory::desc plain, chosen;
  std::optional<dnnl::reorder> reorder;
};

Operand make_operand(const memory::desc& plain, const memory::desc& chosen, bool input) {
  Operand op{plain, chosen, std::nullopt};
  if (plain != chosen)
    op.reorder = input ? dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), plain, cpu_engine(), chosen))
                       : dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), chosen, cpu_engine(), plain));
  return op;
}

// One pass of one chunk geometry: the primitive, its two inputs a, b and output, and the DNNL_ARG
// each is bound to. Forward: a = src, b = weights, out = dst. Backward data: a = diff_dst,
// b = weights, out = diff_src. Backward weights: a = src, b = diff_dst, out = diff_weights.
struct Plan {
  dnnl::primitive conv;
  Operand a, b, out;
  int arg_a = 0, arg_b = 0, arg_out = 0;
  size_t scratch_bytes = 0;
};

using Key = std::array<int64_t, 11>;

Key plan_key(ConvPass pass, const Conv2dGeometry& g) {
  return {int64_t(pass), g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride, g.pad, int64_t(g.bf16)};
}

// With g.bf16, every input of the pass (x, w, d_y) is bf16 in the primitive's layout (the reorders
// round it) and its output (y, d_x, d_w) float32.
Plan build_plan(ConvPass pass, const Conv2dGeometry& g) {
  const auto f32 = memory::data_type::f32, in = g.bf16 ? memory::data_type::bf16 : f32;
  const memory::dims src{g.n, g.c, g.h, g.w}, wei{g.o, g.c, g.kh, g.kw}, dst{g.n, g.o, g.oh, g.ow};
  const memory::dims strides{g.stride, g.stride}, pad_l{g.pad, g.pad};
  const memory::dims pad_r{right_padding(g.h, g.oh, g.kh, g.stride, g.pad),
                           right_padding(g.w, g.ow, g.kw, g.stride, g.pad)};
  // Forward reads src and weights (in) and writes dst (f32); backward data reads diff_dst and
  // weights and writes diff_src; backward weights reads src and diff_dst and writes diff_weights.
  const memory::desc src_any(src, in, Tag::any), wei_any(wei, in, Tag::any), dst_any(dst, f32, Tag::any);
  const memory::desc diff_src_any(src, f32, Tag::any), diff_wei_any(wei, f32, Tag::any);
  const memory::desc diff_dst_any(dst, in, Tag::any);
  const memory::desc src_plain(src, f32, Tag::nchw), wei_plain(wei, f32, Tag::oihw), dst_plain(dst, f32, Tag::nchw);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-thread scratchpads (slot 3)
  const auto alg = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, alg, src_any, wei_any, dst_any,
                                           strides, pad_l, pad_r);
  const dnnl::convolution_forward::primitive_desc fpd(fd, attr, cpu_engine());
  Plan p;
  if (pass == ConvPass::kForward) {
    p.conv = dnnl::convolution_forward(fpd);
    p.a = make_operand(src_plain, fpd.src_desc(), true);
    p.b = make_operand(wei_plain, fpd.weights_desc(), true);
    p.out = make_operand(dst_plain, fpd.dst_desc(), false);
    p.arg_a = DNNL_ARG_SRC, p.arg_b = DNNL_ARG_WEIGHTS, p.arg_out = DNNL_ARG_DST;
    p.scratch_bytes = fpd.scratchpad_desc().get_size();
  } else if (pass == ConvPass::kBackwardData) {
    const dnnl::convolution_backward_data::desc bd(alg, diff_src_any, wei_any, diff_dst_any, strides, pad_l, pad_r);
    const dnnl::convolution_backward_data::primitive_desc bpd(bd, attr, cpu_engine(), fpd);
    p.conv = dnnl::convolution_backward_data(bpd);
    p.a = make_operand(dst_plain, bpd.diff_dst_desc(), true);
    p.b = make_operand(wei_plain, bpd.weights_desc(), true);
    p.out = make_operand(src_plain, bpd.diff_src_desc(), false);
    p.arg_a = DNNL_ARG_DIFF_DST, p.arg_b = DNNL_ARG_WEIGHTS, p.arg_out = DNNL_ARG_DIFF_SRC;
    p.scratch_bytes = bpd.scratchpad_desc().get_size();
  } else {
    const dnnl::convolution_backward_weights::desc wd(alg, src_any, diff_wei_any, diff_dst_any, strides, pad_l, pad_r);
    const dnnl::convolution_backward_weights::primitive_desc wpd(wd, attr, cpu_engine(), fpd);
    p.conv = dnnl::convolution_backward_weights(wpd);
    p.a = make_operand(src_plain, wpd.src_desc(), true);
    p.b = make_operand(dst_plain, wpd.diff_dst_desc(), true);
    p.out = make_operand(wei_plain, wpd.diff_weights_desc(), false);
    p.arg_a = DNNL_ARG_SRC, p.arg_b = DNNL_ARG_DIFF_DST, p.arg_out = DNNL_ARG_DIFF_WEIGHTS;
    p.scratch_bytes = wpd.scratchpad_desc().get_size();
  }
  return p;
}

// The cached plan of `pass` for chunk geometry g (g.n = images per chunk). Created for one thread
// (oneDNN sizes a primitive's work split by the OpenMP thread count at creation).
const Plan& plan(ConvPass pass, const Conv2dGeometry& g) {
  cpu_engine();  // constructed before the cache, so destroyed after the primitives made on it
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Plan>> cache;
  const std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<Plan>& entry = cache[plan_key(pass, g)];
  if (!entry) {
    const OpenMpThreadsScope one(1);
    try {
      entry = std::make_unique<Plan>(build_plan(pass, g));
    } catch (const dnnl::error& e) {
      cache.erase(plan_key(pass, g));
      fail("conv2d: oneDNN could not create the convolution: ", e.what());
    }
  }
  return *entry;
}

// Runs a reorder on this thread: from → to.
void reorder(const dnnl::reorder& r, const memory::desc& from_md, const float* from, const memory::desc& to_md,
             float* to) {
  memory from_mem(from_md, cpu_engine(), const_cast<float*>(from)), to_mem(to_md, cpu_engine(), to);
  r.execute(thread_stream(), from_mem, to_mem);
}

// An input in the primitive's layout: the plain data itself, or its reorder into slot `which`.
const float* chosen_input(const Operand& op, const float* plain, int which) {
  if (!op.reorder) return plain;
  auto* buf = static_cast<float*>(slot(which).get(op.chosen.get_size(), "conv2d"));
  reorder(*op.reorder, op.plain, plain, op.chosen, buf);
  return buf;
}

// Runs plan p on this thread: a and b in their plain layouts unless `b_chosen` (b already in the
// primitive's layout); the output written in plain layout to out.
void run(const Plan& p, const float* a, const float* b, bool b_chosen, float* out) {
  const OpenMpThreadsScope one(1);
  const float* a_c = chosen_input(p.a, a, 0);
  const float* b_c = b_chosen ? b : chosen_input(p.b, b, 1);
  float* out_c = p.out.reorder ? static_cast<float*>(slot(2).get(p.out.chosen.get_size(), "conv2d")) : out;
  void* scratch = slot(3).get(p.scratch_bytes, "conv2d");
  const memory a_mem(p.a.chosen, cpu_engine(), const_cast<float*>(a_c));
  const memory b_mem(p.b.chosen, cpu_engine(), const_cast<float*>(b_c));
  const memory out_mem(p.out.chosen, cpu_engine(), out_c);
  const memory::desc scratch_md({int64_t(std::max<size_t>(p.scratch_bytes, 1))}, memory::data_type::u8, Tag::x);
  const memory scratch_mem(scratch_md, cpu_engine(), scratch);
  p.conv.execute(thread_stream(), {{p.arg_a, a_mem}, {p.arg_b, b_mem}, {p.arg_out, out_mem},
                                   {DNNL_ARG_SCRATCHPAD, scratch_mem}});
  if (p.out.reorder) reorder(*p.out.reorder, p.out.chosen, out_c, p.out.plain, out);
  thread_stream().wait();
}

constexpr int64_t kChunkFloats = 256 << 10;  // a chunk's input + output activations: about 1 MiB
// Images per weight-gradient call: oneDNN's backward-weights kernels reduce over the images of a
// call, and with the 8 of weight_gradient_groups they ran 12–15 % slower on the CNN's 7×7-plane
// layers than with 32 (equal on 14×14; 1 thread, batch 128).
constexpr int64_t kWeightGradientImages = 32;

// Images per chunk of the forward and input-gradient passes: at most the weight-gradient group
// size, and activations of about kChunkFloats at most (one image at least). A function of N and the
// geometry only.
int64_t images_per_chunk(const Conv2dGeometry& g) {
  const int64_t per_image = g.c * g.h * g.w + g.o * g.oh * g.ow;
  const int64_t fit = std::max<int64_t>(1, kChunkFloats / std::max<int64_t>(per_image, 1));
  return std::min(fit, weight_gradient_groups(g.n).per);
}

Conv2dGeometry with_images(Conv2dGeometry g, int64_t n) {
  g.n = n;
  return g;
}

// Weights [O, C, KH, KW] in the layout plan p chose (a per-call copy in `buf` unless it is OIHW).
const float* chosen_weights(const Plan& p, const float* w, std::vector<float>& buf) {
  if (!p.b.reorder) return w;
  buf.resize(p.b.chosen.get_size() / sizeof(float) + 16);
  const OpenMpThreadsScope one(1);
  reorder(*p.b.reorder, p.b.plain, w, p.b.chosen, buf.data());
  thread_stream().wait();
  return buf.data();
}

// Runs `pass` with weights w over the chunks of images: a is x (forward) or d_y (backward data),
// out is y or d_x. Weights are reordered once per call into the layout of the full-chunk plan;
// a short last chunk's plan may choose another layout, and gets its own copy.
void run_chunks(ConvPass pass, View4 out, ConstView4 a, const float* w, const Conv2dGeometry& g) {
  const int64_t per = images_per_chunk(g), chunks = (g.n + per - 1) / per, tail = g.n - (chunks - 1) * per;
  const Plan& full = plan(pass, with_images(g, per));
  const Plan& last = plan(pass, with_images(g, tail));
  std::vector<float> w_full, w_last;
  const float* wf = chosen_weights(full, w, w_full);
  const float* wl = tail == per ? wf : chosen_weights(last, w, w_last);
  parallel_for(chunks, [&](int64_t ch) {
    const bool is_last = ch == chunks - 1;
    run(is_last ? last : full, a.ptr(ch * per), is_last ? wl : wf, true, out.ptr(ch * per));
  });
}

// Whether kAuto gives oneDNN its layer classes on this CPU. oneDNN's direct convolutions measured
// faster than the built-in paths only on the Xeon with AMX; an Ice Lake Xeon ran them at 0.55–0.99×
// per pass with AVX-512 and with AVX2, and Zen 5 trained as fast either way (docs/performance.md).
// oneDNN's own ISA detection decides, so ONEDNN_MAX_CPU_ISA caps it too.
bool onednn_convolutions_preferred() {
  static const bool amx = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  return amx;
}

}  // namespace

bool onednn_applies(ConvPass pass, const Conv2dGeometry& g) {
  const Conv2dEngine e = conv2d_engine();
  if (e == Conv2dEngine::kBuiltin) return false;
  const bool supported = g.n > 0 && g.c > 0 && g.o > 0 && g.oh > 0 && g.ow > 0 &&
                         right_padding(g.h, g.oh, g.kh, g.stride, g.pad) >= 0 &&
                         right_padding(g.w, g.ow, g.kw, g.stride, g.pad) >= 0;
  if (!supported) return false;
  if (e == Conv2dEngine::kOneDnn) return true;
  const bool square3 = g.kh == 3 && g.kw == 3 && g.stride == 1 && g.pad == 1 && g.c >= 16 && g.o >= 16;
  // kAuto in the bf16 mode (a CPU with AVX512-BF16 or AMX; measured on Zen 5 with AVX512-BF16,
  // bench/conv_bench.cpp bf16:1, and applied to AMX unmeasured): against the column path on
  // gemm_bf16, oneDNN's bf16 convolution ran every forward pass of the CNN's layers 1.3–1.8× as
  // fast, and d_x and d_w of the 3×3 layers with >= 16 channels each way 0.97–1.46×; on the stem,
  // CBAM's gate and the 14×14 1×1 layer it lost d_x and d_w (0.25–0.78×), and the 7×7 1×1 layer
  // was even (1.0–1.15×).
  if (g.bf16) return pass == ConvPass::kForward || square3;
  if (!onednn_convolutions_preferred()) return false;
  // kAuto on a CPU with AMX: the one class measured faster by oneDNN there (bench/conv_bench.cpp,
  // the CNN's layers, 1 thread; the table is in docs/performance-data.md): d_w of 3×3 same-size
  // layers with >= 16 channels each way on planes smaller than 12×12, where the built-in d_w is
  // the column path (oneDNN 1.39–1.42×). The built-in Winograd paths win y and d_x on every
  // plane (oneDNN 0.81–1.01× on 7×7, 0.89–1.12× on 14×14) and d_w on 14×14 (0.83–0.93×); 1×1
  // layers, the 1-channel stem and CBAM's 2 → 1 gate stay built-in as well.
  return pass == ConvPass::kBackwardWeights && square3 && g.h * g.w < 144;
}

void onednn_conv_forward(View4 y, ConstView4 x, const float* w, const Conv2dGeometry& g) {
  run_chunks(ConvPass::kForward, y, x, w, g);
}

void onednn_conv_backward_data(View4 d_x, ConstView4 d_y, const float* w, const Conv2dGeometry& g) {
  run_chunks(ConvPass::kBackwardData, d_x, d_y, w, g);
}

void onednn_conv_backward_weights(View4 d_w, ConstView4 d_y, ConstView4 x, const Conv2dGeometry& g) {
  // Fixed groups of kWeightGradientImages images (the last may be shorter), one primitive call
  // each, writing its own partial; the partials are then added in group order.
  const int64_t per = std::min(g.n, kWeightGradientImages), groups = (g.n + per - 1) / per;
  const int64_t tail = g.n - (groups - 1) * per, k = g.c * g.kh * g.kw;
  const Plan& full = plan(ConvPass::kBackwardWeights, with_images(g, per));
  const Plan& last = plan(ConvPass::kBackwardWeights, with_images(g, tail));
  thread_local std::vector<float> partial_buf;
  if (partial_buf.size() < size_t(groups * g.o * k)) partial_buf.resize(size_t(groups * g.o * k));
  float* partial = partial_buf.data();
  parallel_for(groups, [&](int64_t grp) {
    run(grp == groups - 1 ? last : full, x.ptr(grp * per), d_y.ptr(grp * per), false, partial + grp * g.o * k);
  });
  parallel_for(g.o, [&](int64_t o) {
    float* dw = d_w.ptr(o);
    for (int64_t grp = 0; grp < groups; ++grp) {
      const float* p = partial + (grp * g.o + o) * k;
      for (int64_t i = 0; i < k; ++i) dw[i] += p[i];
    }
  });
}

#endif

}  // namespace nn
}  // namespace attnkit
