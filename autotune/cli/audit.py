"""``autotune audit``: start the engine once and show configured vs resolved, side by side.

The trap this catches: an engine that silently runs something other than what was asked for (speculation
turning graph capture off, capture sizes rounded to multiples of 1+K, a fallback model runner, async
scheduling disabled). With ``--strict`` any configured field the engine changed makes the exit status
:attr:`~autotune.core.exit_status.ExitStatus.CHANGED` (3), so CI or a deployment script can refuse such a config.

Usage::

    autotune audit --space search_spaces/h200-dummy.yaml --params cudagraph_mode=FULL_AND_PIECEWISE \\
        --params capture_sizes=[1,2,4,8] --params num_speculative_tokens=3 --params draft=small-draft --strict
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, cast

from autotune.records import encode
from autotune.cli._common import (
    PARAM_ALIASES,
    add_workdir_arg,
    build_engine,
    canonical_params,
    load_space_for,
    parse_kv,
    parse_params,
    write_json,
)
from autotune.core import params as P
from autotune.core.exit_status import ExitStatus
from autotune.core.params import ParamValue, RawParams
from autotune.core.records import Detail, EngineConfig, EngineFacts, RestartResult, config_differences
from autotune.core.redact import redact_text
from autotune.core.secrets import resolve_config, resolve_workload
from autotune.core.schedule import SCHEDULE_KEY, KSchedule, coverage_problems
from autotune.report import kv_findings
from autotune.store.ledger import DEFAULT_WORKDIR

if TYPE_CHECKING:
    from autotune.config.space import SearchSpace
    from autotune.core.records import Workload
    from autotune.engines import RawOptions

__all__ = ["HELP", "AuditRow", "audit_rows", "config_for_audit", "configure_parser", "run", "run_audit"]

HELP = "Start the engine once: configured vs resolved, side by side."
_UNSET = "(engine default)"
_AUDIT_OUTPUT_LEN = 32


@dataclasses.dataclass(frozen=True)
class AuditRow:
    """One field, configured vs resolved; ``changed`` when the configuration set it and the engine differs."""

    field: str
    configured: Any
    resolved: Any
    changed: bool = False


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Flags of ``autotune audit``."""
    parser.add_argument("--space", default="search_spaces/default.yaml", help="search space YAML")
    parser.add_argument("--model", help="model path or hub id; overrides engine_args.model")
    parser.add_argument("--engine", help="engine (default: the space's engine.name, else vllm)")
    parser.add_argument("--engine-opt", action="append", metavar="KEY=VALUE", help="engine option, repeatable")
    parser.add_argument("--params", action="append", metavar="KEY=VALUE",
                        help="the configuration: cudagraph_mode=…, capture_sizes=NAME or [1,2,4], "
                             "num_speculative_tokens=K, draft=NAME (repeatable; unset = engine default)")
    add_workdir_arg(parser, default=os.path.join(DEFAULT_WORKDIR, "audit"))
    parser.add_argument("--strict", action="store_true",
                        help=f"exit {int(ExitStatus.CHANGED)} when the engine changed anything that was configured")
    parser.add_argument("--json", metavar="PATH", help="also write configured, resolved and differences as JSON")


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    """The ``audit`` subcommand."""
    from autotune.cli.preflight import check_output_path, dataset_path, protected_paths

    space = load_space_for(args)
    if args.json:
        # Before the engine starts (issue 32, principle 7): never over the space, the dataset or the engine's logs.
        check_output_path(args.json, "--json", protected_paths(
            space_file=space.source, dataset=dataset_path(space.workload), study_dir=args.workdir),
            workdir=args.workdir)
    params = parse_params(args.params, "--params")
    options = parse_kv(args.engine_opt, "--engine-opt")
    from pathlib import Path

    from autotune.engines.process import set_scope
    from autotune.store.studydir import check_no_links_out

    check_no_links_out(Path(args.workdir))  # the engine's logs and caches stay inside it (issue 44), as a study's
    set_scope(args.workdir)  # its engines are tagged as this workdir's (engines.process.stop_orphans), as a study's
    return run_audit(space, params, options, args.strict, out, engine=args.engine, cache_dir=args.workdir,
                     json_path=args.json)


def run_audit(
    space: SearchSpace,
    params: RawParams,
    engine_options: RawOptions,
    strict: bool,
    out: IO[str] = sys.stdout,
    *,
    engine: str | None = None,
    cache_dir: str | None = None,
    json_path: str | None = None,
) -> ExitStatus:
    """Start one restart of the configuration ``params`` and print configured vs resolved.

    Args:
        space: The search space (engine arguments, drafts, capture-size presets).
        params: ``cudagraph_mode``, ``capture_sizes`` (a preset name or a list), ``num_speculative_tokens``,
            ``draft`` (or their short names, :data:`~autotune.cli._common.PARAM_ALIASES`); anything unset is the
            engine default.
        engine_options: Engine options over the space's ``engine:`` section.
        strict: Return :attr:`ExitStatus.CHANGED` when the engine changed a configured field.
        out: Where the table goes.
        engine: Engine name (default: the space's ``engine.name``, else ``vllm``).
        cache_dir: Engine caches and logs.
        json_path: Also write the audit as JSON here.

    Returns:
        The exit status: 0, :attr:`ExitStatus.CHANGED` (strict and changed), or :attr:`ExitStatus.ERROR` when the
        engine did not start.

    Raises:
        SpaceError, EngineError, KeyError: bad space, unusable engine or unknown parameter choice.
    """
    backend = build_engine(space, engine, dict(engine_options), cache_dir=cache_dir)
    try:
        space = space.in_vocabulary(backend.vocabulary())  # audit what the engine is given in its own names
        config = config_for_audit(space, params)
    except BaseException:
        backend.close()
        raise
    try:
        workload = _audit_workload(space.workload)
        # Started with its references resolved (autotune.core.secrets); the table shows the configuration as written.
        result = backend.run_restart(resolve_config(config), resolve_workload(workload), restart=0,
                                     seed=workload.seed)
        facts = EngineFacts.of(backend.describe())
    finally:
        backend.close()
    # What the engine ran with: the space's engine section and --engine-opt, as the engine validated them.
    rows = audit_rows(config, result, getattr(backend.settings, "env", {}))
    changed = [r for r in rows if r.changed]
    _print_audit(out, config, result, rows, facts)
    # The KV audits on this restart's facts: capacity against the workload the study will run (not the short
    # audit pass), a negative graph-memory estimate.
    for finding in kv_findings(config, [result], encode(space.workload)):
        print(f"KV audit: {finding}", file=out)
    for line in schedule_coverage(config, result):
        print(f"schedule audit: {line}", file=out)
    if json_path:
        # The configuration's credentials stay out; confined to the workdir it lies in (the engine's cache_dir).
        write_json(json_path, _audit_json(config, result, rows, facts), cache_dir)
    if not result.ok:
        return ExitStatus.ERROR
    if changed and strict:
        print(f"audit: {len(changed)} configured field(s) changed by the engine (--strict)", file=out)
        return ExitStatus.CHANGED
    return ExitStatus.SUCCESS


def config_for_audit(space: SearchSpace, params: RawParams) -> EngineConfig:
    """The configuration to audit: the space's translation, with literal capture-size lists allowed.

    A speculative configuration without ``draft`` uses the space's first draft.
    """
    from autotune.cli._common import UsageError
    from autotune.config import K_HARD_MAX
    from autotune.config.space import SCHEDULE_PARAM, Infeasible

    norm = canonical_params(params)
    unknown = [key for key in norm if key not in space.param_names()]
    if unknown:  # a typo would otherwise be dropped in silence and the defaults audited (issue 44)
        raise UsageError(f"--params {unknown[0]}: not a parameter of this space; use one of "
                         f"{', '.join(space.param_names())} (or the short names {', '.join(PARAM_ALIASES)})")
    # The typed values the space's own K and sizes take (--enqueue checks them against the space; audit may go
    # outside it, not outside what vLLM takes): one line naming the flag, never a ValueError from int().
    k = norm.get(P.K, 0)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= K_HARD_MAX):
        raise UsageError(f"--params num_speculative_tokens={k!r}: must be a whole number from 0 to {K_HARD_MAX}")
    typed_sizes = norm.get(P.CAPTURE_SIZES)
    literal_sizes = typed_sizes if isinstance(typed_sizes, list) else None
    if literal_sizes is not None and not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1
                                             for s in literal_sizes):
        raise UsageError(f"--params capture_sizes={literal_sizes!r}: list whole numbers >= 1, e.g. [1, 2, 4, 8], or "
                         "name a preset of the space")
    if literal_sizes is not None:
        norm[P.CAPTURE_SIZES] = "default"
    drafts = [d.name for d in space.drafts]
    if P.DRAFT in norm and norm[P.DRAFT] not in drafts:
        raise UsageError(f"--params draft={norm['draft']!r}: the space has no such draft; use one of "
                         f"{', '.join(drafts) or 'none (the space lists no search.drafts)'}")
    try:
        schedule = space.schedule_of(norm.get(SCHEDULE_PARAM))
    except (Infeasible, KeyError, ValueError, TypeError) as exc:
        raise UsageError(f"--params {SCHEDULE_PARAM}: {exc.args[0] if exc.args else exc}") from None
    speculative = bool(k) or schedule is not None  # k: None or a whole number from 0, checked above
    if speculative and P.DRAFT not in norm:
        if not space.drafts:
            raise UsageError("--params: a speculative configuration needs a draft, and the space has none: add one "
                             "under search.drafts, or audit without num_speculative_tokens and k_schedule")
        norm[P.DRAFT] = space.drafts[0].name
    try:
        # The values as typed, not yet ParamValues: the space reads each one it knows and refuses a bad one below.
        config = space.config_from_params(cast("Mapping[str, ParamValue]", norm))
    except (Infeasible, KeyError, ValueError, TypeError) as exc:
        # The space's own words (a choice it lacks, a combination the engine rejects), on the flag (issue 44).
        raise UsageError(f"--params: {exc.args[0] if exc.args else exc}") from None
    if literal_sizes is None or norm.get(P.MODE) == "NONE":
        return config
    compilation = {**dict(config.compilation_config), "cudagraph_capture_sizes": sorted(int(s) for s in literal_sizes)}
    params_out = {**dict(config.params), P.CAPTURE_SIZES: sorted(int(s) for s in literal_sizes)}
    return dataclasses.replace(config, compilation_config=compilation, params=params_out)


def audit_rows(config: EngineConfig, result: RestartResult, env: Mapping[str, str]) -> list[AuditRow]:
    """Configured vs resolved for every field the audit shows; ``env``: the engine process's extra environment
    (``engine.vllm.env``), which chooses the model runner."""
    resolved = result.resolved
    details = dict(resolved.details) if resolved else {}
    found = config_differences(config, resolved)
    diffs = {d.field for d in found}
    sizes = None if resolved is None or resolved.cudagraph_capture_sizes is None else list(
        resolved.cudagraph_capture_sizes)
    rows = [
        AuditRow("cudagraph_mode", config.cudagraph_mode or _UNSET, _shown(resolved and resolved.cudagraph_mode),
                 "cudagraph_mode" in diffs),
        AuditRow("capture_sizes", _UNSET if config.capture_sizes is None else list(config.capture_sizes),
                 _shown(sizes), "cudagraph_capture_sizes" in diffs),
        AuditRow("compile_mode", config.compilation_config.get("mode", _UNSET),
                 _shown(resolved and resolved.compile_mode)),
    ]
    if details.get(Detail.DECODE_CAPTURE_REQUESTS) is not None:  # vLLM >= 0.34: decode graphs in requests
        change = next((d for d in found if d.field == "decode_graphs"), None)
        wanted = (list(config.decode_requests) if config.decode_requests is not None
                  else f"{list(config.capture_sizes)} tokens" if config.capture_sizes is not None else _UNSET)
        rows.append(AuditRow("decode_graphs", wanted if change is None else change.configured,
                             details[Detail.DECODE_CAPTURE_REQUESTS] if change is None else change.resolved,
                             change is not None))
    want_runner = {"0": "v1", "1": "v2"}.get(str(env.get("VLLM_USE_V2_MODEL_RUNNER", "")), _UNSET)
    got_runner = details.get(Detail.MODEL_RUNNER)
    rows.append(AuditRow("model_runner", want_runner, _shown(got_runner),
                         want_runner != _UNSET and got_runner is not None and want_runner != got_runner))
    want_async = config.engine_args.get("async_scheduling", _UNSET)
    got_async = details.get(Detail.ASYNC_SCHEDULING)
    rows.append(AuditRow("async_scheduling", want_async, _shown(got_async),
                         want_async not in (_UNSET, None) and got_async is not None and bool(want_async) != got_async))
    want_spec = config.spec_method or "off"
    if Detail.SPEC_METHOD in details:  # an engine that does not say is not an engine that changed it
        got_spec = details[Detail.SPEC_METHOD] or "off"
        rows.append(AuditRow("speculative_method", want_spec, got_spec, want_spec != got_spec))
    else:
        rows.append(AuditRow("speculative_method", want_spec, "?"))
    got_k = details.get(Detail.NUM_SPECULATIVE_TOKENS)
    rows.append(AuditRow("num_speculative_tokens", config.num_speculative_tokens, _shown(got_k),
                         got_k is not None and int(got_k or 0) != config.num_speculative_tokens))
    schedule = config.k_schedule
    if schedule is not None or details.get(Detail.SPEC_SCHEDULE):
        got = details.get(Detail.SPEC_SCHEDULE, "?") if Detail.SPEC_SCHEDULE in details else "?"
        got_text = got if got in ("?", None) else KSchedule.of(got).text()
        rows.append(AuditRow("k_schedule", "one K" if schedule is None else schedule.text(),
                             "one K (ignored)" if got is None else got_text, SCHEDULE_KEY in diffs))
    return rows


def schedule_coverage(config: EngineConfig, result: RestartResult) -> list[str]:
    """Where the resolved capture sizes miss a schedule range's verification batch (sequences x (1+K))."""
    schedule, resolved = config.k_schedule, result.resolved
    if schedule is None or resolved is None:
        return []
    seqs = config.engine_args.get("max_num_seqs")
    return coverage_problems(schedule, resolved.cudagraph_capture_sizes, None if seqs is None else int(seqs))


def _shown(value: Any) -> Any:
    return "?" if value is None else value


def _audit_workload(workload: Workload) -> Workload:
    # The audit is about start-up; one short pass proves the configuration runs and reads acceptance.
    # One load level (the highest) is enough for that: after it, max_concurrency is the one level's concurrency.
    workload = workload.at(workload.max_concurrency) if len(workload.levels) > 1 else workload
    return dataclasses.replace(
        workload, num_prompts=max(1, workload.max_concurrency), output_len=min(workload.output_len, _AUDIT_OUTPUT_LEN),
        warmup_passes=0, max_warmup_passes=0, timed_passes=1,
    )


def _print_audit(out: IO[str], config: EngineConfig, result: RestartResult, rows: list[AuditRow],
                 facts: EngineFacts) -> None:
    print(f"audit: {config.label()}   [{facts.name or '?'} {facts.version or ''} {facts.gpu or ''}]".rstrip(), file=out)
    width = max(len(r.field) for r in rows) + 2
    conf_width = max(max(len(str(r.configured)) for r in rows), len("configured")) + 2
    print(f"  {'field':<{width}}{'configured':<{conf_width}}resolved", file=out)
    res_width = max(len(str(r.resolved)) for r in rows) + 2
    for r in rows:
        line = f"  {r.field:<{width}}{str(r.configured):<{conf_width}}"
        line += f"{str(r.resolved):<{res_width}}<- CHANGED" if r.changed else str(r.resolved)
        print(line, file=out)
    notes = result.resolved.notes if result.resolved else ()
    print("start-up log lines that changed the plan:" if notes else "start-up log: no line changed the plan", file=out)
    for note in notes:
        print(f"  {note}", file=out)
    silent = [r.field for r in rows if r.changed and not _announced(r, notes)]
    if silent:
        print(f"changed without a log line saying so: {', '.join(silent)}", file=out)
    if result.ok:
        accept = "" if result.accept_len is None else f", acceptance length {result.accept_len:.2f}"
        startup = "" if result.startup_s is None else f"started in {result.startup_s:.0f} s, "
        print(f"engine ran: {startup}{result.value:.1f} tok/s in one short pass{accept}", file=out)
    else:
        print(f"engine failed ({result.status}): {redact_text(result.error or '')}", file=out)
        if result.log_path:
            print(f"  log: {result.log_path}", file=out)


def _announced(row: AuditRow, notes: tuple[str, ...]) -> bool:
    """Whether a start-up log line names this field's new value (capture-size rounding never has one)."""
    keys = {row.field.lower(), row.field.lower().replace("_", " ")}
    for note in notes:
        low = note.lower()
        if any(k in low for k in keys) and (row.field != "cudagraph_mode" or str(row.resolved) in note):
            return True
    return False


def _audit_json(config: EngineConfig, result: RestartResult, rows: list[AuditRow],
                facts: EngineFacts) -> dict[str, Any]:
    return {
        "config": encode(config),
        "label": config.label(),
        "engine": encode(facts),
        "rows": [dataclasses.asdict(r) for r in rows],
        "changed": [r.field for r in rows if r.changed],
        "restart": encode(result),
    }
