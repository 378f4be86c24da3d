// Python bindings for training building blocks, in submodule _attnkit._train (python/attnkit/
// train.py wraps them):
//   _AdamW(names, params, grads, beta1, beta2, eps, weight_decay, decay_mask): updates numpy
//       float32 arrays in place; .step(lr), .step_count, .state() (copies), .save_state/.load_state
//   clip_grad_norm(grads, max_norm) (in place), global_grad_norm(grads), warmup_cosine_lr(...)
//   is_bias_or_norm(name); byte tokenizer encode/decode; sample_batch(tokens, B, L, seed, step)
// PyTorch equivalents: torch.optim.AdamW, torch.nn.utils.clip_grad_norm_.
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/io/text_corpus.hpp"
#include "attnkit/io/tokenizer.hpp"
#include "attnkit/train/adamw.hpp"
#include "attnkit/train/grad_clip.hpp"
#include "attnkit/train/presets.hpp"
#include "attnkit/train/schedule.hpp"
#include "array_views.hpp"
#include "bindings.hpp"

namespace py = pybind11;

namespace attnkit::python {
namespace {

// A float32 C-contiguous array used in place (never copied, so updates reach the caller).
py::array in_place_f32(const py::handle& obj, const std::string& name, bool writable) {
  py::array a = to_array(obj, name.c_str());
  check(a.dtype().is(py::dtype::of<float>()), name, ": expected dtype float32, got ",
        std::string(py::str(a.dtype())));
  check((a.flags() & py::array::c_style) != 0, name, ": expected a C-contiguous array");
  check(!writable || a.writeable(), name, ": array is read-only");
  return a;
}

std::span<float> float_span(py::array& a) {
  return {static_cast<float*>(a.mutable_data()), size_t(a.size())};
}

// AdamW over numpy arrays; owns references to them so the spans stay valid.
class PyAdamW {
 public:
  PyAdamW(const std::vector<std::string>& names, const py::list& params, const py::list& grads,
          double beta1, double beta2, double eps, double weight_decay,
          const std::vector<bool>& decay_mask) {
    check(params.size() == names.size() && grads.size() == names.size() &&
              decay_mask.size() == names.size(),
          "AdamW: names, params, grads and decay mask differ in length (", names.size(), ", ",
          params.size(), ", ", grads.size(), ", ", decay_mask.size(), ")");
    std::vector<NamedParameter> named;
    for (size_t i = 0; i < names.size(); ++i) {
      keep_.push_back(in_place_f32(params[i], "params[\"" + names[i] + "\"]", true));
      keep_.push_back(in_place_f32(grads[i], "grads[\"" + names[i] + "\"]", false));
      const auto g = float_span(keep_.back());
      named.push_back({names[i], float_span(keep_[keep_.size() - 2]), g});
    }
    std::vector<std::string> excluded;
    for (size_t i = 0; i < names.size(); ++i)
      if (!decay_mask[i]) excluded.push_back(names[i]);
    opt_ = std::make_unique<AdamW>(
        std::move(named),
        AdamWOptions{.beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay},
        [excluded](std::string_view n) {
          return std::find(excluded.begin(), excluded.end(), n) != excluded.end();
        });
  }
  AdamW& opt() { return *opt_; }

 private:
  std::vector<py::array> keep_;
  std::unique_ptr<AdamW> opt_;
};

std::vector<std::span<float>> grad_spans(const py::list& grads, std::vector<py::array>& keep,
                                         bool writable) {
  std::vector<std::span<float>> spans;
  for (size_t i = 0; i < grads.size(); ++i) {
    keep.push_back(in_place_f32(grads[i], "grads[" + std::to_string(i) + "]", writable));
    spans.push_back(float_span(keep.back()));
  }
  return spans;
}

void bind_optim(py::module_& m) {
  py::class_<PyAdamW>(m, "_AdamW")
      .def(py::init<const std::vector<std::string>&, const py::list&, const py::list&, double,
                    double, double, double, const std::vector<bool>&>(),
           py::arg("names"), py::arg("params"), py::arg("grads"), py::arg("beta1"),
           py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("decay_mask"))
      .def("step", [](PyAdamW& s, double lr) { s.opt().step(lr); }, py::arg("lr"),
           "One AdamW update of every parameter (in place) with learning rate lr.")
      .def_property("step_count", [](PyAdamW& s) { return s.opt().step_count(); },
                    [](PyAdamW& s, int64_t t) { s.opt().set_step_count(t); })
      .def("decays", [](PyAdamW& s, size_t i) { return s.opt().decays(i); }, py::arg("i"))
      .def("state",
           [](PyAdamW& s) {
             py::dict out;
             for (const auto& t : s.opt().state()) {
               py::array_t<float> a(py::ssize_t(t.data.size()));
               std::copy(t.data.begin(), t.data.end(), a.mutable_data());
               out[py::str(t.name)] = a;
             }
             return out;
           },
           "Moments as {\"<name>.exp_avg\": m, \"<name>.exp_avg_sq\": v} (float32 copies).")
      .def("save_state", [](PyAdamW& s, const std::string& p) { s.opt().save_state(p); },
           py::arg("path"))
      .def("load_state", [](PyAdamW& s, const std::string& p) { s.opt().load_state(p); },
           py::arg("path"));

  m.def("is_bias_or_norm", [](const std::string& n) { return is_bias_or_norm(n); },
        py::arg("name"), "Default weight-decay exclusion: biases and normalisation weights.");
  m.def("clip_grad_norm",
        [](const py::list& grads, double max_norm) {
          std::vector<py::array> keep;
          const auto spans = grad_spans(grads, keep, true);
          return clip_grad_norm(spans, max_norm);
        },
        py::arg("grads"), py::arg("max_norm"),
        "Scales float32 gradients in place to global L2 norm <= max_norm; returns the norm "
        "before clipping (torch.nn.utils.clip_grad_norm_).");
  m.def("global_grad_norm",
        [](const py::list& grads) {
          std::vector<py::array> keep;
          const auto spans = grad_spans(grads, keep, false);
          std::vector<std::span<const float>> c(spans.begin(), spans.end());
          return global_grad_norm(c);
        },
        py::arg("grads"), "Global L2 norm of float32 gradients, accumulated in float64.");
  m.def("warmup_cosine_lr",
        [](int64_t step, double max_lr, double min_lr, int64_t warmup_steps, int64_t total_steps) {
          return warmup_cosine_lr({.max_lr = max_lr, .min_lr = min_lr,
                                   .warmup_steps = warmup_steps, .total_steps = total_steps},
                                  step);
        },
        py::arg("step"), py::arg("max_lr"), py::arg("min_lr"), py::arg("warmup_steps"),
        py::arg("total_steps"), "Linear warmup then cosine decay to min_lr (llm.c formula).");
}

void bind_text(py::module_& m) {
  m.attr("VOCAB_SIZE") = ByteTokenizer::kVocabSize;
  m.attr("END_OF_TEXT") = ByteTokenizer::kEndOfText;
  m.attr("PAD") = ByteTokenizer::kPad;
  m.def("encode",
        [](const py::bytes& b) {
          const auto ids = ByteTokenizer::encode(std::string_view(b));
          py::array_t<int32_t> a(py::ssize_t(ids.size()));
          std::copy(ids.begin(), ids.end(), a.mutable_data());
          return a;
        },
        py::arg("data"), "Byte-level token ids (int32 [n]) of bytes.");
  m.def("decode",
        [](const py::object& ids, bool skip_special) {
          py::array raw = to_array(ids, "ids");
          require_integer(raw, "ids");
          auto a = to_c_array<int32_t>(raw, "ids");
          check(a.ndim() == 1, "ids: expected a 1-D integer array");
          const std::string s = ByteTokenizer::decode({a.data(), size_t(a.size())},
                                                      {.skip_special = skip_special});
          return py::bytes(s);
        },
        py::arg("ids"), py::arg("skip_special") = false,
        "Bytes of token ids; special tokens as their names unless skip_special.");
  m.def("sample_batch",
        [](const py::object& tokens, int64_t batch, int64_t seq_len, uint64_t seed,
           uint64_t step) {
          py::array raw = to_array(tokens, "tokens");
          require_integer(raw, "tokens");
          auto t = to_c_array<int32_t>(raw, "tokens");
          check(t.ndim() == 1, "tokens: expected a 1-D integer array");
          const auto out = sample_batch({t.data(), size_t(t.size())},
                                        {.batch = batch, .seq_len = seq_len, .seed = seed}, step);
          py::array_t<int32_t> a({batch, seq_len + 1});
          std::copy(out.data(), out.data() + out.numel(), a.mutable_data());
          return a;
        },
        py::arg("tokens"), py::arg("batch"), py::arg("seq_len"), py::arg("seed"), py::arg("step"),
        "[B, L+1] int32 token windows for (seed, step): inputs [:, :L], targets [:, 1:].");
}

// The CLI's --preset shapes (train/presets.hpp) as config.json text.
void bind_presets(py::module_& m) {
  m.attr("GPT_PRESETS") = py::tuple(py::cast(gpt_preset_names()));
  m.attr("BERT_PRESETS") = py::tuple(py::cast(bert_preset_names()));
  m.def("gpt_preset", [](const std::string& name) { return gpt_config_to_json(gpt_preset(name)); }, py::arg("name"),
        "config.json text of the GPT preset `name` (`attnkit train gpt --preset`).");
  m.def("bert_preset", [](const std::string& name) { return bert_config_to_json(bert_preset(name)); },
        py::arg("name"), "config.json text of the BERT preset `name` (`attnkit train bert --preset`).");
}

}  // namespace

void bind_train(py::module_& m) {
  // A submodule, so short names (encode, decode, ...) cannot collide with other areas' bindings.
  py::module_ t = m.def_submodule("_train", "training building blocks; see attnkit.train");
  bind_optim(t);
  bind_text(t);
  bind_presets(t);
}

}  // namespace attnkit::python
