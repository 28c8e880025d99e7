"""The small trained pair shipped in the repository: the embedded default of ``sglang_faser.launch_server``.

Trained once, offline, by ``scripts/train_small_pair.py`` (the Python standard library source plus Shakespeare;
``small_pair/TRAINING.json`` records how) and committed as fp16 safetensors, so that the demo, the tests and the
benchmarks never retrain. Its drafts are accepted often on code and rarely on chat, which is the per-request spread
FASER is built for. Without the folder (a trimmed install) the launcher falls back to the random tiny suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PAIR_DIR = Path(__file__).with_name("small_pair")


@dataclass(frozen=True)
class SmallPair:
    root: Path

    @property
    def target(self) -> Path:
        return self.root / "target"

    @property
    def draft(self) -> Path:  # a separate small Llama, for --speculative-algorithm STANDALONE
        return self.root / "draft"

    @property
    def eagle(self) -> Path:  # an EAGLE-1 head over the target's features
        return self.root / "eagle"

    def complete(self) -> bool:
        return all((d / "model.safetensors").exists() for d in (self.target, self.draft, self.eagle))


def small_pair(root: Path = PAIR_DIR) -> SmallPair | None:
    pair = SmallPair(root)
    return pair if pair.complete() else None


def embedded_default() -> tuple[Path, dict[str, Path]]:
    """The default target and its drafts by algorithm: the trained pair, else the random tiny suite."""
    pair = small_pair()
    if pair is not None:
        return pair.target, {"EAGLE": pair.eagle, "STANDALONE": pair.draft}
    from sglang_faser.models.tiny import ensure_tiny_suite

    suite = ensure_tiny_suite()
    return suite.target, {"EAGLE": suite.eagle, "STANDALONE": suite.standalone}
