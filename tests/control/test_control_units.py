"""The control plane's pure parts: stub drift, wire conversions, bind safety, the policy store (no engine)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from control.auth import check_bind, is_loopback
from control.convert import changes_from_wire, changes_to_wire, policy_to_wire
from control.faser.v1 import control_pb2 as pb
from control.policy_store import PolicyStore
from sglang_faser.spec.config import ConfigError, FaserConfig, Mode

ROOT = Path(__file__).resolve().parents[2]


def test_committed_stubs_match_the_proto(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    fresh = gen.generate(tmp_path)
    assert fresh, "no stubs generated"
    for path in fresh:
        committed = ROOT / "control" / path.relative_to(tmp_path)
        assert committed.read_text() == path.read_text(), f"{committed} drifted: run python scripts/gen_proto.py"


def test_partial_update_round_trip():
    changes = {"mode": "fixed", "max_len": 8, "overlap": False, "fixed_len": None}
    wire = changes_to_wire(changes)
    assert changes_from_wire(wire) == {"mode": Mode.FIXED, "max_len": 8, "overlap": False, "fixed_len": None}
    assert changes_from_wire(pb.Policy()) == {}  # nothing given, nothing changes
    assert changes_from_wire(pb.Policy(min_len=0)) == {"min_len": 0}  # presence, not truthiness


def test_a_full_policy_survives_the_wire():
    config = FaserConfig(mode="fixed", max_len=6, min_len=1, fixed_len=3, frontier_size=2, overlap=False,
                         request_rate=0.5, prior_weight=3.0, explore=0.5, latency_weight=8.0)
    assert FaserConfig().replace(**changes_from_wire(policy_to_wire(config))) == config


def test_every_knob_has_its_typed_proto_field_and_engine_key():
    """The one field table (spec/config.py KNOBS) is what the wire, the engine keys and faserctl derive from."""
    from control.cli import _changes, _parser
    from sglang_faser.engine.control_bridge import decode_policy, encode_policy
    from sglang_faser.spec.config import KNOBS

    fields = pb.Policy.DESCRIPTOR.fields_by_name
    kinds = {"int": "int32", "float": "double", "bool": "bool"}
    for knob in KNOBS[1:]:
        assert knob.name in fields, f"proto Policy lacks {knob.name}"
        assert fields[knob.name].type == getattr(fields[knob.name], f"TYPE_{kinds[knob.kind].upper()}")
        assert (f"clear_{knob.name}" in fields) == knob.optional
    config = FaserConfig(mode="off", max_len=None, explore=2.5, latency_weight=1.0)
    assert decode_policy(encode_policy(config, 7)) == config
    args = _parser().parse_args(["set-policy", "--explore", "0", "--prior-weight", "5", "--overlap", "off",
                                      "--clear-max-len"])
    assert _changes(args) == {"explore": 0.0, "prior_weight": 5.0, "overlap": False, "max_len": None}


def test_unknown_mode_and_set_and_clear_are_refused():
    with pytest.raises(ConfigError, match="mode"):
        changes_from_wire(pb.Policy(mode=42))
    with pytest.raises(ConfigError, match="max_len"):
        changes_from_wire(pb.Policy(max_len=3, clear_max_len=True))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_binds_need_nothing(host):
    assert is_loopback(host)
    check_bind(host, tls=False, token=False, insecure=False)


def test_other_binds_need_tls_and_a_token_or_an_explicit_insecure():
    for tls, token in ((False, False), (True, False), (False, True)):
        with pytest.raises(ValueError, match="non-loopback"):
            check_bind("0.0.0.0", tls=tls, token=token, insecure=False)
    check_bind("0.0.0.0", tls=True, token=True, insecure=False)
    check_bind("10.1.2.3", tls=False, token=False, insecure=True)


class FakeEngine:
    """Records pushes; the store's contract with the engine is push-then-commit."""

    def __init__(self, fail: Exception | None = None):
        self.pushed: list[tuple[str, int]] = []
        self.fail = fail

    def push(self, config, version):
        if self.fail:
            raise self.fail
        self.pushed.append((config.to_json(), version))


def test_store_serializes_versions_persists_and_resumes(tmp_path):
    path = tmp_path / "policy.json"
    engine = FakeEngine()
    store = PolicyStore(engine, path)
    threads = [threading.Thread(target=store.update, args=({"max_len": k % 5},), kwargs={"who": f"t{k}"})
               for k in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    config, version = store.get()
    assert version == 20 and [v for _, v in engine.pushed] == list(range(1, 21))
    saved = json.loads(path.read_text())
    assert saved["version"] == 20 and saved["policy"]["max_len"] == config.max_len
    resumed = PolicyStore(FakeEngine(), path)
    assert resumed.resumed and resumed.get() == (config, 20)


def test_refused_or_unpushable_changes_leave_the_store_untouched(tmp_path):
    store = PolicyStore(FakeEngine(), tmp_path / "p.json")
    store.update({"max_len": 4}, who="op")
    with pytest.raises(ConfigError, match="frontier_size"):
        store.update({"frontier_size": 99}, who="op")
    store.engine = FakeEngine(fail=RuntimeError("engine down"))
    with pytest.raises(RuntimeError):
        store.update({"max_len": 2}, who="op")
    assert store.get() == (FaserConfig(max_len=4), 1)
