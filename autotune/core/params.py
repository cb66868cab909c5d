"""Names and values of a trial's parameters (Optuna's names): the search's vocabulary, one owner for each name.

A configuration is searched, queued (``--enqueue``, the baselines, a warm start, the start design), audited
(``--params``) and replayed by these parameters; the space
(:meth:`autotune.config.space.SearchSpace.config_from_params`) turns them into an :class:`~autotune.core.records.EngineConfig`, which keeps them (``EngineConfig.params``) for its
label. Producers and readers name a parameter through these constants, never by literal. Some names are also
vLLM's own field names (``cudagraph_mode``, ``num_speculative_tokens``): those fields are vLLM's vocabulary
(:mod:`autotune.core.capture`, :mod:`autotune.engines.vllm.vocabulary`), not these.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["CAPTURE_SIZES", "CORE", "DRAFT", "K", "K_SCHEDULE", "MODE", "ParamValue", "RawParams", "TrialParams"]

#: The CUDA-graph mode: one of the space's ``search.cudagraph_modes`` (or ``default``).
MODE = "cudagraph_mode"
#: The capture sizes: the name of one of the space's size choices (``default``); a literal list only in ``audit``.
CAPTURE_SIZES = "capture_sizes"
#: K, the draft tokens per step (0: no speculation); a named K schedule's largest K.
K = "num_speculative_tokens"
#: The draft's name (a choice of ``search.drafts``), present only when K > 0.
DRAFT = "draft"
#: A K schedule: a named one of the space's, ``fixed`` (one K), or a derived schedule's rows.
K_SCHEDULE = "k_schedule"
#: The parameters of the graph and speculation search; every other parameter is a searched engine argument.
CORE = (MODE, CAPTURE_SIZES, K, DRAFT, K_SCHEDULE)

#: One parameter's value: a choice's name, K, a searched engine argument's value (a YAML scalar), a derived K
#: schedule's rows (``[[1, 8, 4], ...]``), or an audit's literal capture sizes.
ParamValue = str | int | float | bool | list[int] | list[list[int]] | None
#: A configuration's parameters, by name (Optuna's ``trial.params``, ``EngineConfig.params``).
TrialParams = dict[str, ParamValue]
#: Parameters as typed on a command line (``--enqueue``, ``--params``), before the space has checked them.
RawParams = Mapping[str, object]
