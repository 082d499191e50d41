"""The timer on the GPU: calls that take turns are timed each on their own, at the same clock."""

import torch

from tilebench.measure.timer import interleaved_times, sleep_cycles_per_ms, summarize


def test_calls_that_take_turns_are_timed_each_and_in_proportion():
    device = torch.device("cuda", torch.cuda.current_device())
    cycles = int(0.05 * sleep_cycles_per_ms(device))  # about 50 us
    calls = []

    def short():
        calls.append("short")
        torch.cuda._sleep(cycles)

    def long():
        calls.append("long")
        torch.cuda._sleep(3 * cycles)

    short_ms, long_ms = interleaved_times([short, long], device, warmup_ms=5, rep_ms=0, n_repeat=40)
    assert len(short_ms) == len(long_ms) == 40
    assert calls[-2:] == ["short", "long"] and calls.count("short") == calls.count("long")
    ratio = summarize(long_ms) / summarize(short_ms)
    assert 2.7 < ratio < 3.3, (summarize(short_ms), summarize(long_ms))
    assert 0.02 < summarize(short_ms) < 0.2, short_ms[:5]
