#pragma once
// The Python module is assembled from one bind_*.cpp per library area.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

namespace attnkit::python {

void bind_attention(pybind11::module_& m);   // bind_attention.cpp
void bind_attention_block(pybind11::module_& m);  // bind_attention_block.cpp
void bind_bert(pybind11::module_& m);        // bind_bert.cpp
void bind_idx(pybind11::module_& m);         // bind_idx.cpp
void bind_image_model(pybind11::module_& m); // bind_image_model.cpp (CNN, ViT, deformable)
void bind_io(pybind11::module_& m);          // bind_io.cpp
void bind_kv(pybind11::module_& m);          // bind_kv.cpp
void bind_kv_cache(pybind11::module_& m);    // bind_kv_cache.cpp
void bind_models(pybind11::module_& m);      // bind_models.cpp
void bind_ms_deform_attn(pybind11::module_& m);  // bind_ms_deform_attn.cpp
void bind_ms_deform_attn_block(pybind11::module_& m);  // bind_ms_deform_attn_block.cpp
void bind_nn(pybind11::module_& m);          // bind_nn.cpp
void bind_train(pybind11::module_& m);       // bind_train.cpp
void bind_vision(pybind11::module_& m);      // bind_vision.cpp (conv, pooling, batch norm, SE, CBAM)
void bind_tools(pybind11::module_& m);       // bind_tools.cpp (sink profile, stream eval)

}  // namespace attnkit::python
