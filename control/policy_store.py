"""The policy the operator asked for: validated, versioned, serialized, logged, persisted, and pushed to the fleet.

Every change goes through :meth:`PolicyStore.update` under one lock, so concurrent SetPolicy calls are applied one
after the other, each on top of the previous. A change is validated by ``FaserConfig`` (a bad one raises
``ConfigError`` naming the field and its bounds and leaves everything as it was), pushed to every replica
(``control/fleet.py``; it fails, changing nothing, only if no replica took it), and then committed: the version
goes up by one, the change is logged with who asked, old and new, and the policy file (``--faser-policy-file``) is
rewritten atomically so that a restarted control service resumes it. :meth:`reconcile` brings replicas that
missed a change up to the current version.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from pathlib import Path

from control.fleet import Fleet
from sglang_faser.spec.config import ConfigError, FaserConfig

logger = logging.getLogger("faser.control.policy")


class PolicyStore:
    def __init__(self, engine: Fleet, path: str | Path | None = None):
        self.engine = engine
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self.config, self.version = FaserConfig(), 0
        self.synced = False  # the fleet was brought together with the store once (sync) or a change was pushed
        if self.path is not None and self.path.exists():
            self.config, self.version = load(self.path)
            logger.info("resuming policy v%d from %s: %s", self.version, self.path, self.config.to_json())
            self.resumed = True
        else:
            self.resumed = False

    def get(self) -> tuple[FaserConfig, int]:
        with self._lock:
            return self.config, self.version

    def update(self, changes: dict, who: str) -> tuple[FaserConfig, int]:
        """Apply a partial update; raises ConfigError (bad value) or the engine's errors (nothing changes)."""
        with self._lock:
            new = self.config.replace(**changes)
            version = self.version + 1
            self.engine.push(new, version)
            old, old_version = self.config, self.version
            self.config, self.version, self.synced = new, version, True
            self._persist()
            logger.info("policy v%d -> v%d by %s: %s; old %s; new %s", old_version, version, who,
                        json.dumps({k: str(v) if k == "mode" else v for k, v in changes.items()}, sort_keys=True),
                        old.to_json(), new.to_json())
            return new, version

    def sync(self) -> None:
        """Bring store and fleet together once a replica is up: push a resumed policy, else adopt the newest
        replica's (the others follow through :meth:`reconcile`)."""
        with self._lock:
            if self.resumed:
                self.engine.push(self.config, self.version)
                logger.info("pushed resumed policy v%d to the fleet", self.version)
            else:
                newest = self.engine.newest()
                self.config = FaserConfig().replace(**newest.report["policy"])
                self.version = newest.version
                self._persist()
            self.synced = True

    def reconcile(self) -> None:
        """Replicas behind the current version (down during a change, or joined since) get it; a replica ahead of
        it (another control service changed it) is adopted, so that two services never push each other back."""
        with self._lock:
            if not self.synced:
                return
            self.engine.refresh()
            newest = self.engine.newest()
            if newest.version > self.version:
                self.config = FaserConfig().replace(**newest.report["policy"])
                self.version = newest.version
                self._persist()
                logger.info("adopted policy v%d from replica %s (changed elsewhere): %s", self.version, newest.url,
                            self.config.to_json())
            self.engine.reconcile(self.config, self.version)

    def applied(self) -> bool:
        """Every reachable replica runs the current version on every rank."""
        with self._lock:
            return self.synced and self.engine.applied(self.version)

    def _persist(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps({"version": self.version, "policy": json.loads(self.config.to_json())}, indent=1)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".policy-")
        with os.fdopen(fd, "w") as handle:
            handle.write(payload + "\n")
        os.replace(tmp, self.path)


def load(path: Path) -> tuple[FaserConfig, int]:
    try:
        data = json.loads(path.read_text())
        return FaserConfig().replace(**data["policy"]), int(data["version"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError("policy_file", f"{path} is not a FASER policy file: {exc}") from None
