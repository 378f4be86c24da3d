// attnkit._attnkit: the compiled half of the Python module (python/attnkit/__init__.py wraps it).
#include <pybind11/pybind11.h>

#include <exception>
#include <new>
#include <string>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/gemm_onednn.hpp"
#include "attnkit/ops/gemm_bf16.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "attnkit/tools/build_info.hpp"
#include "bindings.hpp"

PYBIND11_MODULE(_attnkit, m) {
  m.doc() = "attnkit: exact attention, KV caches and transformer models on the CPU";
  // attnkit::Error surfaces as attnkit.Error, a subclass of ValueError.
  pybind11::register_exception<attnkit::Error>(m, "Error", PyExc_ValueError);
  // A failed allocation is a MemoryError that says so (pybind11's default message is "std::bad_alloc").
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory: an allocation failed (a size argument may be too large)");
    }
  });
  m.def(
      "set_num_threads",
      [](int n) {
        attnkit::check(n <= attnkit::kMaxThreads, "set_num_threads: n must be <= ", attnkit::kMaxThreads,
                       " (<= 0: default), got ", n);
        attnkit::set_num_threads(n);
      },
      pybind11::arg("n"), "Sets attnkit's thread count (<= 0: default; at most 1024).");
  m.def("num_threads", &attnkit::num_threads,
        "attnkit's thread count: set_num_threads's value, else OMP_NUM_THREADS, else the CPUs in "
        "this process's affinity mask (never OpenMP's runtime default, which torch changes).");
  m.def(
      "set_conv2d_engine",
      [](const std::string& name) {
        attnkit::Conv2dEngine e = attnkit::Conv2dEngine::kAuto;
        if (name == "builtin") e = attnkit::Conv2dEngine::kBuiltin;
        else if (name == "onednn") e = attnkit::Conv2dEngine::kOneDnn;
        else attnkit::check(name == "auto", "set_conv2d_engine: expected 'auto', 'builtin' or 'onednn', got '", name, "'");
        attnkit::set_conv2d_engine(e);
      },
      pybind11::arg("engine"),
      "Which convolution conv2d uses: 'auto' (on CPUs with AMX, oneDNN on the layer classes where it measured faster there), "
      "'builtin' (im2col + sgemm, Winograd) or 'onednn' (everywhere it applies; needs a oneDNN build).");
  m.def(
      "conv2d_engine",
      [] {
        const attnkit::Conv2dEngine e = attnkit::conv2d_engine();
        return e == attnkit::Conv2dEngine::kBuiltin ? "builtin" : e == attnkit::Conv2dEngine::kOneDnn ? "onednn" : "auto";
      },
      "The convolution engine in effect: 'auto', 'builtin' or 'onednn'.");
  m.def("set_packed_gemm", &attnkit::set_packed_gemm_enabled, pybind11::arg("on"),
        "Whether linear layers of at least 128 tokens run y and d_x on oneDNN's matmul with the "
        "weight reordered once (True, the default in a oneDNN build) or on OpenBLAS (False).");
  m.def("packed_gemm", &attnkit::packed_gemm_enabled,
        "Whether the packed-weight GEMM is switched on (set_packed_gemm, ATTNKIT_PACKED_GEMM=0); it applies only in oneDNN builds (build_info()).");
  m.def(
      "set_sgemm_path",
      [](const std::string& name) { attnkit::set_sgemm_path(attnkit::parse_sgemm_path(name)); },
      pybind11::arg("path"),
      "Which library the kernels' one-thread GEMM tiles use: 'auto' (the default: oneDNN's matmul "
      "where it measured faster), 'openblas' (all on OpenBLAS) or 'onednn' (every product oneDNN "
      "takes); 'auto' and 'onednn' act as 'openblas' without oneDNN (build_info()).");
  m.def(
      "sgemm_path", [] { return std::string(attnkit::sgemm_path_name(attnkit::sgemm_path())); },
      "The sgemm path in effect: 'auto', 'openblas' or 'onednn' (set_sgemm_path, ATTNKIT_SGEMM_PATH).");
  m.def(
      "set_matmul_precision",
      [](const std::string& name) { attnkit::set_matmul_precision(attnkit::parse_matmul_precision(name)); },
      pybind11::arg("precision"),
      "Precision of the linear and convolution layers' products, process-wide: 'f32' (default) or 'bf16' (bf16 inputs, "
      "f32 accumulation, on AMX / AVX512-BF16; weights and everything else stay f32; ValueError where "
      "bf16_available() is False).");
  m.def("matmul_precision", [] { return attnkit::matmul_precision_name(attnkit::matmul_precision()); },
        "The linear and convolution layers' product precision in effect: 'f32' or 'bf16'.");
  m.def("bf16_available", &attnkit::gemm_bf16_available,
        "True when set_matmul_precision('bf16') can be used: a oneDNN build on a CPU with AVX512-BF16 or AMX.");
  m.def(
      "build_info",
      [] {
        const attnkit::BuildInfo b = attnkit::build_info();
        pybind11::dict d;
        d["threads"] = b.threads;
        d["threads_source"] = b.threads_source;
        d["blas_threads"] = b.blas_threads;
        d["blas_library"] = b.blas_library;
        d["blas_kernels"] = b.blas_kernels;
        d["simd"] = b.simd;
        d["compiler"] = b.compiler;
        d["conv2d_onednn"] = attnkit::conv2d_has_onednn();
        return d;
      },
      "What serves attnkit's kernels in this process: threads (and their source), the BLAS "
      "library file, its kernels and threads, the compiled SIMD level, the compiler and whether "
      "conv2d can use oneDNN.");
  attnkit::python::bind_attention(m);
  attnkit::python::bind_attention_block(m);
  attnkit::python::bind_bert(m);
  attnkit::python::bind_idx(m);
  attnkit::python::bind_image_model(m);
  attnkit::python::bind_io(m);
  attnkit::python::bind_kv(m);
  attnkit::python::bind_kv_cache(m);
  attnkit::python::bind_models(m);
  attnkit::python::bind_ms_deform_attn(m);
  attnkit::python::bind_ms_deform_attn_block(m);
  attnkit::python::bind_nn(m);
  attnkit::python::bind_train(m);
  attnkit::python::bind_vision(m);
  attnkit::python::bind_tools(m);
}
