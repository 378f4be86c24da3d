// Python bindings for BERT: load/save, one call that runs the encoder and heads (optionally the
// backward) and returns losses, outputs and gradients by Hugging Face name.
#include <pybind11/stl.h>

#include "array_views.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/models/bert.hpp"
#include "bind_text_model.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

py::array_t<float> copy_of(ConstView2 v) {
  auto out = new_array({py::ssize_t(v.shape[0]), py::ssize_t(v.shape[1])});
  for (int64_t i = 0; i < v.shape[0]; ++i)
    std::copy_n(v.ptr(i), v.shape[1], out.mutable_data() + i * v.shape[1]);
  return out;
}


}  // namespace

void bind_bert(py::module_& m) {
  using namespace pybind11::literals;
  py::class_<BertModel> cls(m, "_BertModel");
  def_text_model_io(cls, parse_bert_config, bert_config_to_json)
      .def("parameters", [](const BertModel& b) { return named_copies(b, b.parameters().data()); })
      .def(
          "run",
          [](BertModel& b, const py::object& tokens, const py::object& types, const py::object& cu,
             const py::object& seqs, const py::object& mlm, const py::object& nsp,
             const py::object& labels, const py::object& starts, const py::object& ends,
             bool backward, bool mlm_logits, bool training, const py::object& seed_obj) {
            const uint64_t seed = unsigned_arg(seed_obj, "seed");
            const auto ids = int32_vector(tokens, "tokens"), tt = int32_vector(types, "token_type_ids"),
                       cus = int32_vector(cu, "cu_seqlens"), sq = int32_vector(seqs, "sequences"),
                       tm = int32_vector(mlm, "mlm_labels"), tn = int32_vector(nsp, "nsp_labels"),
                       tl = int32_vector(labels, "labels"), ts = int32_vector(starts, "start_positions"),
                       te = int32_vector(ends, "end_positions");
            check(!ids.empty(), "tokens: needs at least one token");
            BertLosses losses;
            {
              py::gil_scoped_release nogil;
              b.set_training(training, seed);
              losses = b.forward({ids, tt, cus, sq}, {tm, tn, tl, ts, te});
              if (backward) {
                b.zero_grad();
                b.backward();
              }
            }
            py::dict out;
            out["loss"] = losses.total;
            out["mlm_loss"] = losses.mlm;
            out["nsp_loss"] = losses.nsp;
            out["task_loss"] = losses.task;
            out["mlm_count"] = losses.mlm_count;
            out["sequence_output"] = copy_of(b.sequence_output());
            if (b.config().has_pooler()) out["pooled_output"] = copy_of(b.pooled_output());
            if (b.config().architecture != BertArchitecture::kMaskedLM)
              out["task_logits"] = copy_of(b.task_logits());
            if (mlm_logits) {
              auto z = new_array({py::ssize_t(ids.size()), py::ssize_t(b.config().vocab_size)});
              b.mlm_logits(mutable_view<2>(z));
              out["mlm_logits"] = z;
            }
            if (backward) out["grads"] = named_copies(b, b.gradients().data());
            return out;
          },
          "tokens"_a, "token_type_ids"_a = py::none(), "cu_seqlens"_a = py::none(),
          "sequences"_a = py::none(), "mlm_labels"_a = py::none(), "nsp_labels"_a = py::none(),
          "labels"_a = py::none(), "start_positions"_a = py::none(), "end_positions"_a = py::none(),
          "backward"_a = false, "mlm_logits"_a = false, "training"_a = false, "seed"_a = py::int_(0),
          "Encoder + heads on one packed batch; returns a dict of losses, outputs and (backward) "
          "gradients by Hugging Face name.");
}

}  // namespace attnkit::python
