"""The launcher's ``--faser-*`` flags: parsed and validated before SGLang (or any model) is loaded.

SGLang's own parser is closed (msgspec namespaces, no plugin field; sglang-0.5.23-map.md §8.8), so the launcher
splits the command line in two: the ``--faser-*`` flags, which become a :class:`FaserConfig`, and everything else,
which goes unchanged to ``sglang.srt.server_args.prepare_server_args``.
"""

from __future__ import annotations

import argparse

from sglang_faser.spec.config import MAX_SPEC_LEN, ConfigError, FaserConfig, Mode

PREFIX = "--faser-"


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
    group = parser.add_argument_group("FASER")
    group.add_argument(
        "--faser-mode",
        choices=[m.value for m in Mode],
        default=Mode.ADAPTIVE.value,
        help="adaptive: per-request lengths from the goodput policy; fixed: --faser-fixed-len for every "
        "request; off: stock SGLang speculative decoding (default: %(default)s)",
    )
    group.add_argument(
        "--faser-max-len",
        type=int,
        default=None,
        help=f"largest draft length per request, 0..{MAX_SPEC_LEN} (default: --speculative-num-steps)",
    )
    group.add_argument(
        "--faser-min-len", type=int, default=0, help="smallest draft length per request (default: 0)"
    )
    group.add_argument(
        "--faser-fixed-len",
        type=int,
        default=None,
        help="draft length in --faser-mode fixed (default: the max length)",
    )
    group.add_argument(
        "--faser-frontier-size",
        type=int,
        default=0,
        help="draft positions per verification chunk; 0 verifies the whole step at once (default: 0)",
    )
    group.add_argument(
        "--faser-overlap",
        type=_on_off,
        default=True,
        metavar="{on,off}",
        help="overlap frontier verification with drafting (default: on)",
    )
    return parser


def parse_faser_args(argv: list[str]) -> tuple[FaserConfig, list[str]]:
    """Split ``argv`` into a validated FaserConfig and the arguments meant for SGLang.

    Exits with status 2 and a one-line message on an unknown ``--faser-*`` flag or an out-of-bounds value.
    """
    parser = build_parser()
    known, rest = parser.parse_known_args(argv)
    unknown = [a for a in rest if a.startswith(PREFIX)]
    if unknown:
        parser.error(f"unrecognized FASER flag: {unknown[0].split('=')[0]} (see --help)")
    try:
        config = FaserConfig(
            mode=known.faser_mode,
            max_len=known.faser_max_len,
            min_len=known.faser_min_len,
            fixed_len=known.faser_fixed_len,
            frontier_size=known.faser_frontier_size,
            overlap=known.faser_overlap,
        )
    except ConfigError as exc:
        parser.error(f"--faser-{exc.field.replace('_', '-')}: {exc.reason}")
    return config, rest
