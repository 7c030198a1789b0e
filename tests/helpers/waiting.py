"""Waiting: every test waits by polling a condition until a deadline, never by a fixed sleep that races something.

Every deadline is multiplied by one factor, DURAKV_TEST_TIME_SCALE (default 1): on a loaded machine (CI, or a
load average above the core count) scripts/test.sh raises it, so a wait that takes 3 s on a quiet machine and 20 s
at load average 15 still ends in a pass, while a condition that never comes still ends in a failure.
"""

import os
import time

import valkey


def _time_scale():
    text = os.environ.get("DURAKV_TEST_TIME_SCALE", "").strip()
    if not text:
        return 1.0
    scale = float(text)
    if not 1.0 <= scale <= 100.0:
        raise ValueError("DURAKV_TEST_TIME_SCALE must be between 1 and 100, got %r" % text)
    return scale


TIME_SCALE = _time_scale()


def scaled(seconds):
    """A deadline or socket timeout in seconds, stretched by DURAKV_TEST_TIME_SCALE."""
    return seconds * TIME_SCALE


def wait_until(predicate, timeout_s=10.0, interval_s=0.02, what="condition"):
    """Polls predicate() until it returns something truthy (returned) or scaled(timeout_s) passes (TimeoutError,
    with the last exception predicate raised)."""
    deadline = time.monotonic() + scaled(timeout_s)
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last_exc = exc
        time.sleep(interval_s)
    raise TimeoutError(f"timed out waiting for {what}" + (f": {last_exc!r}" if last_exc else ""))


def wait_get_refused(client, key, text, timeout_s, what):
    """Polls GET key until the server refuses it with exactly `text` (a lapsed lease, a stale replica, ...)."""
    def refused():
        try:
            client.get(key)
            return False
        except valkey.exceptions.ResponseError as exc:
            return str(exc) == text
    wait_until(refused, timeout_s, what=what)


def wait_new_primary(cluster, old_name, timeout_s=30.0):
    """Polls until a node other than old_name is master and accepts a write; returns (proc, seconds)."""
    t0 = time.monotonic()
    deadline = t0 + scaled(timeout_s)
    while time.monotonic() < deadline:
        p = cluster.primary(0)
        if p is not None and p.name != old_name:
            try:
                with valkey.Valkey(host="127.0.0.1", port=p.port, socket_timeout=scaled(2)) as c:
                    if c.set("__probe__", "1"):
                        return p, time.monotonic() - t0
            except (valkey.exceptions.ResponseError, valkey.exceptions.ConnectionError,
                    valkey.exceptions.TimeoutError):
                pass    # still electing, or too busy to answer the probe in time: ask again
        time.sleep(0.01)
    raise TimeoutError(f"no new primary within {scaled(timeout_s)}s")


def default_sigint():
    """A Popen preexec_fn: the child starts with SIGINT's default disposition, so Python in it turns Ctrl-C into
    KeyboardInterrupt. A suite launched in the background of a non-interactive shell (`cmd &`) runs with SIGINT
    ignored, which every child would inherit, and a test of what Ctrl-C does would see nothing happen."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)
