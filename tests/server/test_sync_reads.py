"""Reads in sync mode pay for the journal only when they touch a write that is not committed yet."""

import threading

import pytest

from conftest import wait_until

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores


def test_read_of_a_clean_key_does_not_wait_for_a_pending_write(server_factory):
    srv = server_factory("--durability", "sync")
    with srv.client() as writer, srv.client() as reader:
        reader.set("clean", "c")
        assert reader.info("durability")["journal_max_appends_in_flight"] == 1  # the local journal's window
        writer.execute_command("DEBUG", "JOURNAL-STALL", "1500")
        t = threading.Thread(target=lambda: writer.set("slow", "v"))
        t.start()
        try:
            wait_until(lambda: reader.info("durability")["journal_applied_index"]
                       > reader.info("durability")["journal_commit_index"], 5, interval_s=0.001,
                       what="write in flight")
            assert reader.get("clean") == b"c"
            info = reader.info("durability")
            # Answered while the write is still uncommitted, and counted as no wait.
            assert info["journal_applied_index"] > info["journal_commit_index"]
            assert info["durability_read_waits"] == 0
            assert reader.get("slow") == b"v"      # this one waits for the commit
            assert reader.info("durability")["durability_read_waits"] == 1
        finally:
            t.join(10)
            writer.execute_command("DEBUG", "JOURNAL-STALL", "0")
