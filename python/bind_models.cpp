// Python bindings for models (GPT): load/save, logits, loss and gradients by parameter name; the
// model-type registry (models/model_registry.hpp) the Python loaders dispatch through.
#include <pybind11/stl.h>

#include "array_views.hpp"
#include "attnkit/models/gpt.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/tools/convert_gqa.hpp"
#include "attnkit/train/gpt_trainer.hpp"
#include "bind_text_model.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

std::vector<int32_t> token_ids(const py::object& obj, const char* name) {
  auto ids = int32_vector(obj, name);
  check(!ids.empty(), name, ": needs at least one token");
  return ids;
}

}  // namespace

void bind_models(py::module_& m) {
  using namespace pybind11::literals;
  m.def(
      "convert_gqa",
      [](const std::string& in_dir, const std::string& out_dir, int64_t kv_heads, const std::string& method,
         uint64_t seed) {
        convert_gqa(in_dir, out_dir, {.kv_heads = kv_heads, .method = parse_gqa_pool_method(method, "method"),
                                      .seed = seed});
      },
      "in_dir"_a, "out_dir"_a, "kv_heads"_a, "method"_a = "mean", "seed"_a = 0,
      "Writes out_dir with kv_heads KV heads, pooling each group's K/V projections (mean, first, random).");
  m.def(
      "_model_type",
      [](const std::string& dir) {
        const ModelType& t = model_type_of_dir(dir);
        return py::make_tuple(t.model_type, model_kind_name(t.kind));
      },
      "dir"_a, "(model_type, kind) of a model directory; kind is \"GPT\", \"BERT\" or \"image\".");
  m.def(
      "_require_model_kind",
      [](const std::string& dir, const std::string& kind, const std::string& who) {
        const ModelKind k = kind == "GPT" ? ModelKind::kGpt : kind == "BERT" ? ModelKind::kBert : ModelKind::kImage;
        require_model_kind(dir, k, who.c_str());
      },
      "dir"_a, "kind"_a, "who"_a, "Raises ValueError unless dir holds a model of that kind.");
  py::class_<GptModel> cls(m, "_GptModel");
  def_text_model_io(cls, parse_gpt_config, gpt_config_to_json)
      .def(
          "logits",
          [](GptModel& g, const py::object& tokens, const py::object& cu) {
            const auto ids = token_ids(tokens, "tokens");
            const auto cus = int32_vector(cu, "cu_seqlens");
            auto out = new_array({py::ssize_t(ids.size()), g.config().vocab_size});
            {
              py::gil_scoped_release nogil;
              g.logits({ids, cus}, mutable_view<2>(out));
            }
            return out;
          },
          "tokens"_a, "cu_seqlens"_a = py::none(), "logits [T, V] for int token ids [T].")
      .def(
          "loss_and_grads",
          [](GptModel& g, const py::object& tokens, const py::object& targets, const py::object& cu) {
            const auto ids = token_ids(tokens, "tokens");
            const auto tg = int32_vector(targets, "targets");
            const auto cus = int32_vector(cu, "cu_seqlens");
            float loss = 0;
            {
              py::gil_scoped_release nogil;
              g.zero_grad();
              loss = g.forward({ids, cus}, tg);
              g.backward();
            }
            return py::make_tuple(loss, named_copies(g, g.gradients().data()));
          },
          "tokens"_a, "targets"_a, "cu_seqlens"_a = py::none(),
          "Mean next-token loss and every parameter's gradient (dict by Hugging Face name).")
      .def(
          "adamw_losses",
          [](GptModel& g, const py::object& tokens, const py::object& targets, const py::object& cu,
             int steps, double lr, double beta1, double beta2, double eps, double weight_decay) {
            const auto ids = token_ids(tokens, "tokens");
            const auto tg = int32_vector(targets, "targets");
            const auto cus = int32_vector(cu, "cu_seqlens");
            AdamW opt(named_parameters(g), {.beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay});
            std::vector<float> losses;
            py::gil_scoped_release nogil;
            for (int s = 0; s <= steps; ++s) {
              g.zero_grad();
              losses.push_back(g.forward({ids, cus}, tg));
              if (s == steps) break;
              g.backward();
              opt.step(lr);
            }
            return losses;
          },
          "tokens"_a, "targets"_a, "cu_seqlens"_a, "steps"_a, "lr"_a, "beta1"_a, "beta2"_a, "eps"_a,
          "weight_decay"_a,
          "Losses of `steps` AdamW steps on one batch (norms and biases without weight decay), and the final loss.")
      .def("parameters", [](const GptModel& g) { return named_copies(g, g.parameters().data()); });
}

}  // namespace attnkit::python
