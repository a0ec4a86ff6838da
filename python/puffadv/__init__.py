"""puffadv: fast, correct advantage kernels (PufferLib's puff advantage, GAE,
V-trace) for CPU, CUDA and HIP, taking any DLPack array."""
from ._api import compute_puff_advantage
from ._conventions import gae, td_lambda_returns, vtrace
from ._estimators import Estimate, VTraceEstimate
from ._family import discounted_returns, eligibility_traces, episodic_cumsum, n_step_returns, q_lambda, retrace
from ._core import build_info as _build_info
from ._fallback import BackendUnavailableError, FallbackWarning, set_fallback
from ._recurrence import linear_recurrence
from ._report import backend, cmake_dir

__version__ = _build_info()["version"]

__all__ = ["compute_puff_advantage", "gae", "td_lambda_returns", "vtrace", "discounted_returns",
           "n_step_returns", "retrace", "q_lambda", "episodic_cumsum", "eligibility_traces", "linear_recurrence",
           "Estimate",
           "VTraceEstimate", "backend", "cmake_dir", "__version__",
           "set_fallback", "BackendUnavailableError", "FallbackWarning"]
