// shadowgrad._C: the C++ GA engine (src/accumulate/ShadowAccumulator.h) for Python. Thin on purpose: the
// user-facing class, its checks and docstrings live in shadowgrad/__init__.py. What only C++ can do is here:
// folding into the shadow tree on the AccumulateGrad post-hooks (PyTorch 1.13 has no post-accumulate-grad hook in
// Python), and lending a grad_dtype shadow as .grad of a parameter in another dtype (Python's .grad setter
// refuses a dtype different from the parameter's); and the fused AdamW update (src/optim/AdamWUpdate.h) that
// shadowgrad.optim.AdamW runs over a param group in one call.
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/utils/pybind.h>

#include "accumulate/ShadowAccumulator.h"
#include "optim/AdamWUpdate.h"

namespace py = pybind11;
using shadowgrad::accumulate::ShadowAccumulator;

namespace {

c10::ScalarType to_scalar_type(const py::object& dtype) {
  if (!THPDtype_Check(dtype.ptr()))
    throw py::type_error("grad_dtype must be a torch.dtype, e.g. torch.bfloat16, got " +
                         std::string(py::str(py::type::handle_of(dtype))));
  auto type = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
  if (!c10::isFloatingType(type))
    throw py::value_error("grad_dtype must be a floating dtype (torch.float32, torch.bfloat16, torch.float16, "
                          "torch.float64)");
  return type;
}

// Sets params[i].grad = shadows[i] for the optimizer to read. A .grad already there means a backward() ran
// outside the accumulation window; lending over it would silently drop that gradient.
void lend(const ShadowAccumulator& acc) {
  const auto& params = acc.params();
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].grad().defined())
      throw std::logic_error("step(): parameter " + std::to_string(i) +
                             " already has .grad (a backward() outside begin()/end()?); its gradient would be "
                             "lost. Call backward() inside the window, or zero the grads first");
  const auto& shadows = acc.shadows();
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor param = params[i];  // shares the TensorImpl: sets the parameter's own .grad
    param.mutable_grad() = shadows[i];
  }
}

void reclaim(ShadowAccumulator& acc) {
  for (at::Tensor param : acc.params()) param.mutable_grad() = at::Tensor();
  acc.zero_();
}

// One AdamW step of a param group: for each parameter the fused loop can take, steps[i] += 1 and one pass over
// params[i], grads[i] (fp32, or a bf16 shadow as it is), exp_avgs[i], exp_avg_sqs[i]. Returns the positions of the
// others (another dtype, not contiguous, not on the CPU...), untouched, for the caller's stock step.
std::vector<size_t> adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                               const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                               const std::vector<at::Tensor>& steps, double lr, double beta1, double beta2,
                               double eps, double weight_decay) {
  const size_t n = params.size();
  if (grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n || steps.size() != n)
    throw std::invalid_argument("adamw_step: params, grads, exp_avgs, exp_avg_sqs and steps differ in length");
  at::NoGradGuard no_grad;
  std::vector<size_t> left;
  for (size_t i = 0; i < n; ++i) {
    if (!shadowgrad::optim::adamw_fusable(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i])) {
      left.push_back(i);
      continue;
    }
    at::Tensor step = steps[i];
    step.add_(1);  // torch.optim.AdamW's state["step"]: a float tensor
    const auto c = shadowgrad::optim::AdamWStep::make(lr, beta1, beta2, eps, weight_decay,
                                                      static_cast<int64_t>(step.item<double>()));
    shadowgrad::optim::adamw_update_(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], c);
  }
  return left;
}

} // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "C++ core of shadowgrad; use shadowgrad.ShadowAccumulator.";
  m.attr("__version__") = SHADOWGRAD_VERSION;  // CMake's project(VERSION): the one place the version is written
  py::class_<ShadowAccumulator>(m, "Engine")
      .def(py::init([](const std::vector<at::Tensor>& params, const py::object& dtype) {
             return std::make_unique<ShadowAccumulator>(params, to_scalar_type(dtype));
           }),
           py::arg("params"), py::arg("grad_dtype"))
      .def("begin", py::overload_cast<>(&ShadowAccumulator::begin))
      .def("end", &ShadowAccumulator::end)
      .def("global_norm", &ShadowAccumulator::global_norm)
      .def("scale_", &ShadowAccumulator::scale_, py::arg("factor"))
      .def("clip_global_norm_", &ShadowAccumulator::clip_global_norm_, py::arg("max_norm"))
      .def("zero_", &ShadowAccumulator::zero_)
      .def("lend", &lend)
      .def("reclaim", &reclaim)
      .def_property_readonly("params", &ShadowAccumulator::params)
      .def_property_readonly("shadows", &ShadowAccumulator::shadows)
      .def_property_readonly("nbytes", &ShadowAccumulator::bytes)
      .def_property_readonly("folds", &ShadowAccumulator::folds)
      .def_property_readonly("fold_seconds", &ShadowAccumulator::fold_seconds)
      .def_property_readonly("microbatch_sq_norms", &ShadowAccumulator::microbatch_sq_norms)
      .def("squared_norm", &ShadowAccumulator::squared_norm)
      .def("set_measure_sq_norms", &ShadowAccumulator::set_measure_sq_norms, py::arg("on"));
  m.def("adamw_step", &adamw_step, py::arg("params"), py::arg("grads"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"),
        py::arg("steps"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"),
        py::call_guard<py::gil_scoped_release>());
}
