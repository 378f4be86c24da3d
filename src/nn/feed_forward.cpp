// GELU feed-forward block (nn/feed_forward.hpp): linear → gelu → linear, and the backwards in
// reverse. The fast and the reference block are one composition over two sets of layers (the
// fast ones, the *_reference ones), so they cannot drift apart; the layers carry the arithmetic
// and their own reference/fast trios.
// PyTorch: F.linear(F.gelu(F.linear(x, W1, b1), approximate=...), W2, b2).
#include "attnkit/nn/feed_forward.hpp"

#include "attnkit/nn/linear.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace {

// The layers a feed-forward block is built from: the fast ones or the references.
struct FeedForwardLayers {
  void (*linear_forward)(View2, ConstView2, ConstView2, std::span<const float>);
  void (*linear_backward)(View2, View2, std::span<float>, ConstView2, ConstView2, ConstView2);
  void (*gelu_forward)(View2, ConstView2, GeluApproximation);
  void (*gelu_backward)(View2, ConstView2, ConstView2, GeluApproximation);
};

constexpr FeedForwardLayers kFeedForwardFast{linear_forward, linear_backward, gelu_forward,
                                             gelu_backward};
constexpr FeedForwardLayers kFeedForwardReference{linear_forward_reference,
                                                  linear_backward_reference,
                                                  gelu_forward_reference, gelu_backward_reference};

// Checks x [T, C], the weights ([F, C], [F], [C, F], [C]; biases optional) and the cache
// ([T, F] each); throws attnkit::Error naming the argument. Returns F.
int64_t check_feed_forward(const char* fn, ConstView2 x, const FeedForwardParams& p,
                           const FeedForwardCache& cache) {
  const int64_t t = x.shape[0], c = x.shape[1], f = p.w1.shape[0];
  nn::check_matrix(x, fn, "x", "[T, C]", t, c);
  nn::check_matrix(p.w1, fn, "w1", "[F, C]", f, c);
  nn::check_span(p.b1, fn, "b1", "[F]", f, true);
  nn::check_matrix(p.w2, fn, "w2", "[C, F]", c, f);
  nn::check_span(p.b2, fn, "b2", "[C]", c, true);
  nn::check_matrix(cache.pre, fn, "cache.pre", "[T, F]", t, f);
  nn::check_matrix(cache.u, fn, "cache.u", "[T, F]", t, f);
  return f;
}

void feed_forward_forward_with(const FeedForwardLayers& layers, const char* fn, View2 out,
                               const FeedForwardCache& cache, ConstView2 x,
                               const FeedForwardParams& p, GeluApproximation approx) {
  check_feed_forward(fn, x, p, cache);
  nn::check_matrix(out, fn, "out", "[T, C]", x.shape[0], x.shape[1]);
  layers.linear_forward(cache.pre, x, p.w1, p.b1);
  layers.gelu_forward(cache.u, cache.pre, approx);
  layers.linear_forward(out, cache.u, p.w2, p.b2);
}

void feed_forward_backward_with(const FeedForwardLayers& layers, const char* fn, View2 d_x,
                                const FeedForwardGrads& g, View2 d_hidden, ConstView2 d_out,
                                ConstView2 x, const FeedForwardCache& cache,
                                const FeedForwardParams& p, GeluApproximation approx) {
  const int64_t t = x.shape[0], c = x.shape[1], f = check_feed_forward(fn, x, p, cache);
  nn::check_matrix(d_out, fn, "d_out", "[T, C]", t, c);
  nn::check_matrix(d_hidden, fn, "d_hidden", "[T, F]", t, f);
  if (nn::present(d_x)) nn::check_matrix(d_x, fn, "d_x", "[T, C]", t, c);
  if (nn::present(g.w1)) nn::check_matrix(g.w1, fn, "grads.w1", "[F, C]", f, c);
  nn::check_span(g.b1, fn, "grads.b1", "[F]", f, true);
  if (nn::present(g.w2)) nn::check_matrix(g.w2, fn, "grads.w2", "[C, F]", c, f);
  nn::check_span(g.b2, fn, "grads.b2", "[C]", c, true);
  layers.linear_backward(d_hidden, g.w2, g.b2, d_out, cache.u, p.w2);
  layers.gelu_backward(d_hidden, d_hidden, cache.pre, approx);  // in place: d_u → d_pre
  layers.linear_backward(d_x, g.w1, g.b1, d_hidden, x, p.w1);
}

}  // namespace

void feed_forward_forward(View2 out, const FeedForwardCache& cache, ConstView2 x,
                          const FeedForwardParams& params, GeluApproximation approx) {
  feed_forward_forward_with(kFeedForwardFast, "feed_forward_forward", out, cache, x, params,
                            approx);
}

void feed_forward_backward(View2 d_x, const FeedForwardGrads& grads, View2 d_hidden,
                           ConstView2 d_out, ConstView2 x, const FeedForwardCache& cache,
                           const FeedForwardParams& params, GeluApproximation approx) {
  feed_forward_backward_with(kFeedForwardFast, "feed_forward_backward", d_x, grads, d_hidden, d_out,
                             x, cache, params, approx);
}

void feed_forward_forward_reference(View2 out, const FeedForwardCache& cache, ConstView2 x,
                                    const FeedForwardParams& params, GeluApproximation approx) {
  feed_forward_forward_with(kFeedForwardReference, "feed_forward_forward_reference", out, cache, x,
                            params, approx);
}

void feed_forward_backward_reference(View2 d_x, const FeedForwardGrads& grads, View2 d_hidden,
                                     ConstView2 d_out, ConstView2 x, const FeedForwardCache& cache,
                                     const FeedForwardParams& params, GeluApproximation approx) {
  feed_forward_backward_with(kFeedForwardReference, "feed_forward_backward_reference", d_x, grads,
                             d_hidden, d_out, x, cache, params, approx);
}

}  // namespace attnkit
