"""HDR latency histograms (hdrhistogram package): recording in bulk, merging across processes, summaries.

Latencies are integers in microseconds. Workers collect raw samples in arrays (cheap appends on the hot path),
fold them into a histogram once a second, and ship the histogram encoded (compressed, base64) to the parent,
which decodes and adds them up.
"""

from collections import Counter

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3
PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record_samples(hist, samples, weight=1) -> int:
    """Adds raw microsecond samples (any iterable of ints) to hist, each counted `weight` times (a batch's
    one sample for its requests); returns how many were added."""
    n = 0
    record = hist.record_value
    for value, count in Counter(samples).items():
        if value < 0:
            value = 0
        elif value > HIGHEST_US:
            value = HIGHEST_US
        record(value, count * weight)
        n += count * weight
    return n


def encode(hist) -> bytes:
    return hist.encode()


def decode(data) -> HdrHistogram:
    return HdrHistogram.decode(data)


def merge(hists) -> HdrHistogram:
    """A new histogram holding the sum of hists (histograms or their encodings)."""
    total = new_histogram()
    for h in hists:
        if h is None:
            continue
        total.add(decode(h) if isinstance(h, (bytes, bytearray, str)) else h)
    return total


def percentile_ms(hist, percentile) -> float:
    return hist.get_value_at_percentile(percentile) / 1000.0


def summarize(hist) -> dict:
    """count, mean and p50/p90/p99/p99.9/max in milliseconds (None when the histogram is empty)."""
    count = hist.get_total_count()
    out = {"count": count}
    if not count:
        out.update({"mean": None, "max": None, **{_pname(p): None for p in PERCENTILES}})
        return out
    out["mean"] = round(hist.get_mean_value() / 1000.0, 4)
    for p in PERCENTILES:
        out[_pname(p)] = round(percentile_ms(hist, p), 4)
    out["max"] = round(hist.get_max_value() / 1000.0, 4)
    return out


def _pname(p) -> str:
    return "p" + (f"{p:g}")
