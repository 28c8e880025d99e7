"""The phase-time instrument's arithmetic: one sample per scheduler iteration that ran a decode batch, under its
batch size; host work = the phases' sum less the target's forward."""

from __future__ import annotations

from sglang_faser.engine.phase_times import PhaseTimes, read


def iteration(times: PhaseTimes, batch: int | None, forward: float, run: float, other: float) -> None:
    times.next_iteration()
    times.add("ingest", other)
    times.add("schedule", other)
    if batch is not None:
        times.ran(batch)
    times.add("forward", forward)  # inside run
    times.add("run", run)
    times.add("results", other)


def test_decode_iterations_are_sampled_by_batch_size_and_host_work_excludes_the_forward(tmp_path):
    now = [0.0]
    times = PhaseTimes(str(tmp_path / "phases.json"), clock=lambda: now[0])
    for ms in (5.0, 6.0, 7.0):
        iteration(times, 1, forward=ms / 1e3, run=(ms + 0.5) / 1e3, other=1e-4)
    iteration(times, None, forward=0.2, run=0.3, other=1e-4)  # a prefill: no sample
    iteration(times, 8, forward=9e-3, run=1e-2, other=2e-4)
    now[0] = 2.0
    times.next_iteration()  # the batch-8 iteration ends; a second has passed: the file is written

    summary = read(str(tmp_path / "phases.json"))
    assert len(summary) == 1
    (by_batch,) = summary.values()
    assert by_batch["1"]["steps"] == 3 and by_batch["8"]["steps"] == 1
    one = by_batch["1"]["median_us"]
    assert one["forward"] == 6000.0 and one["run"] == 6500.0
    assert one["host"] == 800.0  # 0.5 ms of the run outside the forward + 3 x 0.1 ms
    assert by_batch["8"]["median_us"]["host"] == 1600.0
