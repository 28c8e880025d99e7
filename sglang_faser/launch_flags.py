"""The launcher's ``--faser-*`` flags: parsed and validated before SGLang (or any model) is loaded.

SGLang's own parser is closed (msgspec namespaces, no plugin field; sglang-0.5.23-map.md §8.8), so the launcher
splits the command line in two: the ``--faser-*`` flags, which become a :class:`FaserConfig`, and everything else,
which goes unchanged to ``sglang.srt.server_args.prepare_server_args``. ``--faser-mode stock`` gives no
FaserConfig at all: stock SGLang, no FASER worker and no control service.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from sglang_faser.spec.config import KNOBS, ConfigError, FaserConfig, Mode

PREFIX = "--faser-"
STOCK = "stock"  # launcher only, not a policy Mode: nothing of FASER is installed
REJECTION_SAMPLING = "--speculative-use-rejection-sampling"
WARMUP_CHOICES = ("auto", "on", "off")


def _on_off(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("on", "true", "1", "yes"):
        return True
    if lowered in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sglang_faser.launch_server",
        description="SGLang's server with FASER speculative decoding. Every sglang.launch_server flag is "
        "accepted; the --faser-* flags below are FASER's own.",
        usage="%(prog)s [sglang.launch_server flags] [--faser-* flags]",
        add_help=False,
        allow_abbrev=False,
    )
    group = parser.add_argument_group("FASER policy (every one also settable live: faserctl set-policy)")
    for knob in KNOBS:
        flag = PREFIX + knob.name.replace("_", "-")
        if knob.kind == "mode":
            group.add_argument(flag, choices=[m.value for m in Mode] + [STOCK], default=None,
                               help=f"{knob.help}; stock: SGLang's own speculative decoding, no FASER worker and "
                               f"no control service (default: {knob.default})")
        else:
            kind = {"int": int, "float": float, "bool": _on_off}[knob.kind]
            bounds = "" if knob.kind == "bool" else f", in {knob.bounds}"
            group.add_argument(flag, type=kind, default=None, metavar="{on,off}" if knob.kind == "bool" else None,
                               help=f"{knob.help}{bounds} (default: {knob.default})")
    control = parser.add_argument_group("FASER control plane (gRPC; faserctl talks to it)")
    control.add_argument("--faser-control", type=_on_off, default=True, metavar="{on,off}",
                         help="serve the FASER control service beside the engine (default: on)")
    control.add_argument("--faser-control-host", default="127.0.0.1",
                         help="address of the control service (default: 127.0.0.1, loopback only)")
    control.add_argument("--faser-control-port", type=int, default=50051, help="its port (default: 50051)")
    control.add_argument("--faser-control-tls-cert", help="PEM certificate: serve the control plane over TLS")
    control.add_argument("--faser-control-tls-key", help="PEM private key of --faser-control-tls-cert")
    control.add_argument("--faser-control-token-file",
                         help="file holding a token every call must send as 'authorization: Bearer <token>'")
    control.add_argument("--faser-control-insecure", action="store_true",
                         help="allow a non-loopback address without TLS and a token (not recommended)")
    control.add_argument("--faser-policy-file",
                         help="keep the policy in this JSON file; a restart resumes the policy it holds")
    start = parser.add_argument_group("FASER start-up")
    start.add_argument("--faser-warmup", choices=WARMUP_CHOICES, default="auto",
                       help="before serving, run every draft depth at every batch-size bucket once, so that no "
                       "request waits for a kernel compiled at its first use (SGLang's --warmups faser_depths; "
                       "auto: on where a GPU serves, off on CPU, where nothing compiles; default: auto)")
    return parser


def warmup_wanted(argv: list[str], on_cpu: bool) -> bool:
    """Whether the launcher adds FASER's start-up warm-up (``--faser-warmup``) to SGLang's ``--warmups``."""
    known, _ = build_parser().parse_known_args(argv)
    return known.faser_warmup == "on" or (known.faser_warmup == "auto" and not on_cpu)


@dataclass(frozen=True)
class ControlFlags:
    """The control-plane flags, checked for safety; ``enabled`` false means --faser-control off."""

    enabled: bool
    host: str
    port: int
    tls_cert: str | None
    tls_key: str | None
    token_file: str | None
    insecure: bool
    policy_file: str | None


def parse_launch_args(argv: list[str]) -> tuple[FaserConfig | None, ControlFlags, list[str]]:
    """Like :func:`parse_faser_args`, plus the control-plane flags (exit 2 on unsafe or inconsistent ones).

    A ``--faser-policy-file`` that exists decides the starting policy (the --faser-* policy flags are then only
    its defaults), so that a restarted server resumes what the operator last set. With ``--faser-mode stock``
    there is nothing to control: the control service is off and the policy file is not read.
    """
    parser = build_parser()
    config, rest = parse_faser_args(argv)
    known, _ = parser.parse_known_args(argv)
    flags = ControlFlags(known.faser_control and config is not None, known.faser_control_host,
                         known.faser_control_port, known.faser_control_tls_cert, known.faser_control_tls_key,
                         known.faser_control_token_file, known.faser_control_insecure, known.faser_policy_file)
    if flags.enabled:
        from control.auth import check_bind

        try:
            if bool(flags.tls_cert) != bool(flags.tls_key):
                raise ValueError("--faser-control-tls-cert and --faser-control-tls-key must be given together")
            if not 0 <= flags.port <= 65535:
                raise ValueError(f"--faser-control-port must be in [0, 65535], got {flags.port}")
            for name, path in (("--faser-control-tls-cert", flags.tls_cert), ("--faser-control-tls-key",
                               flags.tls_key), ("--faser-control-token-file", flags.token_file)):
                if path and not os.path.isfile(path):
                    raise ValueError(f"{name}: no such file {path}")
            check_bind(flags.host, tls=bool(flags.tls_cert), token=bool(flags.token_file), insecure=flags.insecure)
        except ValueError as exc:
            parser.error(str(exc))
    if config is not None and flags.policy_file and os.path.exists(flags.policy_file):
        from control.policy_store import load

        try:
            config, _ = load(Path(flags.policy_file))
        except ConfigError as exc:
            # name the bad field (``max_len: must be in ...``); an unreadable file is already said in the reason
            parser.error(f"--faser-policy-file: {exc.reason if exc.field == 'policy_file' else exc}")
    return config, flags, rest


def parse_faser_args(argv: list[str]) -> tuple[FaserConfig | None, list[str]]:
    """Split ``argv`` into a validated FaserConfig (None for ``--faser-mode stock``) and the arguments for SGLang.

    Exits with status 2 and a one-line message on an unknown ``--faser-*`` flag, an out-of-bounds value (checked
    in stock mode too), or SGLang's rejection sampling with FASER installed: its chain kernel ignores the
    per-request chain cuts (``retrieve_next_token``), so the output would no longer be the target's.
    """
    parser = build_parser()
    known, rest = parser.parse_known_args(argv)
    unknown = [a for a in rest if a.startswith(PREFIX)]
    if unknown:
        parser.error(f"unrecognized FASER flag: {unknown[0].split('=')[0]} (see --help)")
    stock = known.faser_mode == STOCK
    if REJECTION_SAMPLING in rest and not stock:
        parser.error(f"{REJECTION_SAMPLING} ignores FASER's per-request draft lengths (output would not be "
                     "lossless); use it only with --faser-mode stock")
    given = {k.name: getattr(known, "faser_" + k.name) for k in KNOBS}
    given = {name: value for name, value in given.items() if value is not None and not (stock and name == "mode")}
    try:
        config = FaserConfig(**given)
    except ConfigError as exc:
        parser.error(f"--faser-{exc.field.replace('_', '-')}: {exc.reason}")
    return (None if stock else config), rest
