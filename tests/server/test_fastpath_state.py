"""The compiled core decides whether it may run commands from one object, the pipeline's core state
(commands/corestate.py), and every input of that decision writes to it where it changes.

Each test flips one input on a live in-process server, the way the server flips it (a CONFIG SET, a WATCH, a
topology install) or, for what only the server itself changes (statistics during replay, a failed journal,
expiry on a replica ...), by setting the owner's attribute on the loop; then it checks the state says so, that
the core stops running commands (INFO server `durakv_core_commands` stands still while GETs are answered), and
that it runs them again once the input is back. A stale decision would let the core serve what the pipeline
refuses, so each owner's write is what is tested, never the state's own fields.

Per connection, the session's ten flags the core used to read one by one are folded into `core_block` by their
setters (commands/session.py): each is flipped on a live client's session and the core's answer to that client's
next batch checked.
"""

import time

import pytest
import valkey

from durakv import fastpath
from durakv.commands.corestate import (LIMITS, OUTPUT_LIMITS_ALL, OUTPUT_LIMITS_NONE, OUTPUT_LIMITS_SPECIAL,
                                       REASONS, CoreState)
from durakv.commands.pipeline import Pipeline
from durakv.commands.session import (CORE_BLOCK_ALWAYS, CORE_BLOCK_GATED, CORE_BLOCK_SPECIAL,
                                     CORE_BLOCK_UNAUTHENTICATED, Session)
from durakv.keyspace import Keyspace
from durakv.server.cluster import ClusterRouting, unassigned_topology

from conftest import wait_until
from test_pipeline import InProcessServer

# (the tests of a live server need the compiled core: its fixtures skip without; the state's and the session's
# own rules do not)

CONTAINERS = ("watchers", "moving", "deleted", "own_feed")


def _core_count(c):
    return int(c.info("server")["durakv_core_commands"])


def _core_runs(c, n=3):
    """Sends n GETs (each answered); whether the core ran any of them."""
    before = _core_count(c)
    for _ in range(n):
        assert c.get("k") == b"v"
    return _core_count(c) > before


def _core_stands_still(c, n=3, refused=None):
    """Sends n GETs, each answered (the value, or the error `refused` names); whether the core ran none."""
    before = _core_count(c)
    for _ in range(n):
        if refused is None:
            assert c.get("k") == b"v"
        else:
            with pytest.raises(valkey.exceptions.ResponseError, match=refused):
                c.get("k")
    return _core_count(c) == before


class _Server:
    """One in-process server and a client whose GETs the core runs (after the LRU clock's first tick)."""

    def __init__(self, tmp_path, *args):
        self.srv = InProcessServer(tmp_path / "data", *args).start()
        self.c = self.srv.client(single_connection_client=True)
        assert self.c.set("k", "v")
        wait_until(lambda: _core_runs(self.c), 20, what="the compiled core ran GET")

    def loop(self, fn):
        return self.srv.on_loop(fn)

    @property
    def server(self):
        return self.srv.server

    def state(self):
        st = self.server.pipeline.core_state
        return self.loop(lambda: (st.reasons(), st.waiting_on()))

    def flipped(self, reason, flip, restore, refused=None):
        """flip() (on the loop): the state names `reason` and the core stands still; restore(): it runs again."""
        self.loop(flip)
        try:
            reasons, waiting = self.state()
            assert reason in reasons + waiting
            assert _core_stands_still(self.c, refused=refused)
        finally:
            self.loop(restore)
        assert self.state() == ([], [])
        wait_until(lambda: _core_runs(self.c), 10, what="the core runs GET again")

    def close(self):
        self.c.close()
        self.srv.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    if fastpath.core is None:
        pytest.skip("needs the compiled core (pip install with gcc)")
    s = _Server(tmp_path_factory.mktemp("corestate"), "--durability", "sync")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def clustered(tmp_path_factory):
    if fastpath.core is None:
        pytest.skip("needs the compiled core (pip install with gcc)")
    s = _Server(tmp_path_factory.mktemp("corestate-cluster"), "--durability", "sync", "--cluster-enabled", "yes")
    try:
        yield s
    finally:
        s.close()


def test_a_serving_server_holds_no_reason(served):
    assert served.state() == ([], [])
    st = served.server.pipeline.core_state
    assert type(st) is CoreState and st.may_run is True and st.blocked == 0


# -- inputs a client changes ----------------------------------------------------------------------------------

def test_admission_maxmemory(served):
    c = served.c
    assert c.info("server")["durakv_core_blocked"] in ("", None)
    c.config_set("maxmemory", "100mb")
    assert "admission" in served.state()[0]
    assert c.info("server")["durakv_core_blocked"] == "admission"    # (INFO says why)
    assert _core_stands_still(c)
    c.config_set("maxmemory", "0")
    assert served.state() == ([], [])
    wait_until(lambda: _core_runs(c), 10, what="the core runs GET again")


def test_admission_client_pause(served):
    """CLIENT PAUSE WRITE: admission checks every write (pause is an admission input)."""
    c = served.c
    c.execute_command("CLIENT", "PAUSE", "60000", "WRITE")
    try:
        assert "admission" in served.state()[0]
        assert _core_stands_still(c)
    finally:
        c.execute_command("CLIENT", "UNPAUSE")
    assert served.state() == ([], [])
    wait_until(lambda: _core_runs(c), 10, what="the core runs GET again")


def test_observer_keyspace_events(served):
    c = served.c
    c.config_set("notify-keyspace-events", "KEA")
    assert "observer" in served.state()[0]
    assert _core_stands_still(c)
    c.config_set("notify-keyspace-events", "")
    assert served.state() == ([], [])
    wait_until(lambda: _core_runs(c), 10, what="the core runs GET again")


def test_watchers_of_another_client(served):
    """A WATCH anywhere: every write must be checked against it (the pipeline's watchers, held by reference)."""
    other = served.srv.client(single_connection_client=True)
    try:
        assert other.execute_command("WATCH", "w") in (b"OK", "OK", True)
        assert "watchers" in served.state()[1]
        assert _core_stands_still(served.c)
        other.execute_command("UNWATCH")
        assert served.state() == ([], [])
        wait_until(lambda: _core_runs(served.c), 10, what="the core runs GET again")
    finally:
        other.close()


def test_access_lfu(served):
    c = served.c
    c.config_set("maxmemory-policy", "allkeys-lfu")
    assert "access" in served.state()[0]
    assert _core_stands_still(c)
    c.config_set("maxmemory-policy", "noeviction")
    assert served.state() == ([], [])
    wait_until(lambda: _core_runs(c), 10, what="the core runs GET again")


def test_the_lru_stamp_follows_the_keyspace_clock(served):
    ks = served.server.keyspace
    st = served.server.pipeline.core_state

    def tick():
        ks.lru_offset_s += 1000       # DEBUG LRU-CLOCK-ADVANCE's way
        ks.lru_tick()
        return ks.lru_stamp, st.lru_stamp
    stamp, published = served.loop(tick)
    assert stamp is not None and published == stamp
    served.loop(lambda: setattr(ks, "lru_offset_s", ks.lru_offset_s - 1000) or ks.lru_tick())
    assert served.loop(lambda: st.lru_stamp == ks.lru_stamp)


def test_the_lru_clock_is_set_before_the_first_command(server_factory):
    """A server's LRU clock was first set by its first cron tick: until then (1/hz s after start) "access" held the
    compiled core back and a test that ran its commands at once on a fresh server found none of them run there
    (compat/test_valkey80_reply_differences.py, first on its server). It is set at start, as Valkey's initServer
    sets server.lruclock; hz 1 leaves a second before the first tick."""
    if fastpath.core is None:
        pytest.skip("needs the compiled core (pip install with gcc)")
    srv = server_factory("--hz", "1")
    with srv.client() as c:
        assert c.info("server")["durakv_core_blocked"] == ""
        c.set("k", "v")
        assert _core_runs(c)


# -- inputs only the server changes ---------------------------------------------------------------------------

def test_stats_off(served):
    p = served.server.pipeline
    served.flipped("stats_off", lambda: setattr(p, "stats_enabled", False), lambda: setattr(p, "stats_enabled", True))


def test_an_injected_clock(served):
    p = served.server.pipeline
    served.flipped("clock", lambda: setattr(p, "perf_counter", lambda: time.perf_counter()),
                   lambda: setattr(p, "perf_counter", time.perf_counter))


def test_refusing_writes(served):
    d = served.server.durability
    served.flipped("refusing", lambda: setattr(d, "refusing", True), lambda: setattr(d, "refusing", False))


def test_expiry_off(served):
    ks = served.server.keyspace
    served.flipped("no_expire", lambda: setattr(ks, "expire_enabled", False),
                   lambda: setattr(ks, "expire_enabled", True))


def test_expired_keys_hidden(served):
    ks = served.server.keyspace
    served.flipped("hide_expired", lambda: setattr(ks, "hide_expired", True),
                   lambda: setattr(ks, "hide_expired", False))


class _LinkGate:
    """A role gate without fast_serving (as a REPLICAOF link's): admission asks it, the core cannot."""
    checks_stale = False
    handover = None

    def is_replica(self):
        return False

    def serving_error(self, write):
        return None


class _MemberGate(_LinkGate):
    """A shard member's gate: the core asks fast_serving() per keyed command."""

    def __init__(self):
        self.serving = True
        self.asked = 0

    def fast_serving(self):
        self.asked += 1
        return self.serving


def test_a_gate_the_core_cannot_ask(served):
    p = served.server.pipeline
    served.flipped("gate", lambda: setattr(p, "gate", _LinkGate()), lambda: setattr(p, "gate", None))


def test_a_member_gate_is_asked_per_keyed_command(served):
    p = served.server.pipeline
    gate = _MemberGate()
    served.loop(lambda: setattr(p, "gate", gate))
    try:
        assert served.loop(lambda: p.core_state.gate is gate)
        assert served.state() == ([], [])
        wait_until(lambda: _core_runs(served.c), 10, what="the core runs GET under a serving gate")
        assert gate.asked > 0
        gate.serving = False          # (the lease lapsed: the gate's own rule says so)
        assert _core_stands_still(served.c)
        gate.serving = True
        wait_until(lambda: _core_runs(served.c), 10, what="the core runs GET again")
    finally:
        served.loop(lambda: setattr(p, "gate", None))
    assert served.loop(lambda: p.core_state.gate is None)


def _probe(server):
    """The core's answer to a PING from the client's connection, asked on the loop: (next, status); status 1 is
    "the state sends this batch to the pipeline"."""
    (conn,) = server.clients.values()
    return server.batch_core.run(conn, [[b"PING"]], 0)


def test_the_servers_own_deletions_not_yet_sent(served):
    """keyspace.deleted_by_server (notify's wrapper included) is the list the state holds."""
    server = served.server
    ks = server.keyspace

    def probe():
        assert server.pipeline.core_state.deleted is ks.deleted_by_server
        list.append(ks.deleted_by_server, (0, b"ghost", "expired"))   # (no hook: nothing is told of it)
        try:
            return server.pipeline.core_state.waiting_on(), _probe(server)
        finally:
            ks.deleted_by_server.clear()
    assert served.loop(probe) == (["deleted"], (0, 1))
    wait_until(lambda: _core_runs(served.c), 10, what="the core runs GET again")


def test_pushes_queued_behind_a_reply(served):
    server = served.server

    def probe():
        feed = server.hooks.own_feed
        assert server.pipeline.core_state.own_feed is feed
        feed.append(None)
        try:
            return server.pipeline.core_state.waiting_on(), _probe(server)
        finally:
            feed.clear()
    assert served.loop(probe) == (["own_feed"], (0, 1))
    wait_until(lambda: _core_runs(served.c), 10, what="the core runs GET again")


# -- cluster mode -------------------------------------------------------------------------------------------

def test_slot_codes_follow_the_installed_topology(clustered):
    """A topology install (ClusterRouting.install) hands the state the new router's slot codes: a node that owns
    no slot any more stops serving in the core at once (the pipeline answers CLUSTERDOWN), and serves again once
    its slots are back."""
    server = clustered.server
    routing = server.cluster_routing
    st = server.pipeline.core_state
    assert clustered.loop(lambda: st.slot_codes is routing.router.slot_codes and st.moving is routing.moving)
    topology, revision = routing.topology, routing.revision
    me = routing.router.myself

    def drop():
        routing.install(unassigned_topology(routing.myself_id, me.ip, me.port, me.tls_port), revision + 1)
        return st.slot_codes is routing.router.slot_codes and not any(st.slot_codes)
    assert clustered.loop(drop)
    c = clustered.c
    before = _core_count(c)
    with pytest.raises(valkey.exceptions.ResponseError, match="CLUSTERDOWN"):
        c.get("k")
    assert _core_count(c) == before
    clustered.loop(lambda: routing.install(topology, revision + 2))
    assert clustered.loop(lambda: st.slot_codes is routing.router.slot_codes)
    wait_until(lambda: _core_runs(c), 10, what="the core runs GET again")


def test_a_router_without_a_topology(clustered):
    """Cluster mode before the first topology (no router: CLUSTERDOWN) is the pipeline's."""
    server = clustered.server
    p = server.pipeline
    routing = server.cluster_routing
    fresh = ClusterRouting(server, routing.myself_id)
    clustered.flipped("routing", lambda: setattr(p, "router", fresh), lambda: setattr(p, "router", routing),
                      refused="CLUSTERDOWN")
    assert clustered.loop(lambda: p.core_state.slot_codes is routing.router.slot_codes)


def test_keys_moving_to_another_shard(clustered):
    routing = clustered.server.cluster_routing
    clustered.flipped("moving", lambda: routing.moving.add(b"elsewhere"),
                      lambda: routing.moving.discard(b"elsewhere"))


# -- the limits the core checks per batch: written to the state by their owners ------------------------------

def _limits(s):
    st = s.server.pipeline.core_state
    return s.loop(lambda: {name: getattr(st, name) for name in LIMITS})


def _config_set(c, name, value):
    was = c.config_get(name)[name]
    assert c.config_set(name, value)
    return was


def _logged(c, kind):
    return c.execute_command("COMMANDLOG", "LEN", kind)


def test_the_slow_log_threshold(served):
    """CONFIG SET commandlog-execution-slower-than (slowlog-log-slower-than) and latency-monitor-threshold write
    the monitors' threshold to the state; at 0 every GET the core runs goes to the slow log."""
    c = served.c
    assert _limits(served)["threshold_us"] == 10000
    was = _config_set(c, "slowlog-log-slower-than", 0)
    try:
        assert _limits(served)["threshold_us"] == 0
        c.execute_command("COMMANDLOG", "RESET", "slow")
        assert _core_runs(c, 5)
        entries = c.execute_command("COMMANDLOG", "GET", 100, "slow")
        assert sum(1 for e in entries if e[3] == [b"GET", b"k"]) == 5
        assert _config_set(c, "slowlog-log-slower-than", -1) == "0"
        assert _limits(served)["threshold_us"] > 10 ** 15          # off: never
        latency_was = _config_set(c, "latency-monitor-threshold", 7)
        try:
            assert _limits(served)["threshold_us"] == 7000
        finally:
            c.config_set("latency-monitor-threshold", latency_was)
    finally:
        c.config_set("slowlog-log-slower-than", was)
        c.execute_command("COMMANDLOG", "RESET", "slow")
    assert _limits(served)["threshold_us"] == 10000


@pytest.mark.parametrize("kind, limit", [("large-request", "request_limit"), ("large-reply", "reply_limit")])
def test_the_large_request_and_reply_limits(served, kind, limit):
    """CONFIG SET commandlog-request-larger-than / commandlog-reply-larger-than write the limit to the state; under
    it, every GET the core runs is logged (a GET k request counts 47 bytes, its reply 7); a log of length 0
    turns it off."""
    c = served.c
    option = "commandlog-%s-larger-than" % kind.split("-")[1]
    max_len = "commandlog-%s-max-len" % kind
    assert _limits(served)[limit] == 1024 * 1024
    was = _config_set(c, option, 2)
    try:
        assert _limits(served)[limit] == 2
        c.execute_command("COMMANDLOG", "RESET", kind)
        assert _core_runs(c, 4)
        entries = c.execute_command("COMMANDLOG", "GET", 100, kind)
        assert sum(1 for e in entries if e[3] == [b"GET", b"k"]) == 4
        max_was = _config_set(c, max_len, 0)
        try:
            assert _limits(served)[limit] > 10 ** 15
        finally:
            c.config_set(max_len, max_was)
        assert _limits(served)[limit] == 2
    finally:
        c.config_set(option, was)
        c.execute_command("COMMANDLOG", "RESET", kind)
    assert _limits(served)[limit] == 1024 * 1024


def test_the_output_limits(served):
    """CONFIG SET client-output-buffer-limit writes whose output the flush checks: the defaults limit only the
    replica and pubsub classes (SPECIAL: this plain client's batches are written by the core), a normal-class
    limit reaches every client (the core leaves the flush to the connection, which checks the limit), none
    reaches nobody. The core runs the GETs in each case."""
    c = served.c
    checks = []

    def count_checks():
        (conn,) = [x for x in served.server.clients.values()]
        real = conn._check_output_limits
        conn._check_output_limits = lambda: (checks.append(1), real())[1]
        return lambda: conn.__dict__.pop("_check_output_limits")
    assert _limits(served)["output_limits"] == OUTPUT_LIMITS_SPECIAL
    undo = served.loop(count_checks)
    was = _config_set(c, "client-output-buffer-limit", "normal 64mb 32mb 60")
    try:
        assert _limits(served)["output_limits"] == OUTPUT_LIMITS_ALL
        del checks[:]
        assert _core_runs(c, 4)
        assert len(checks) >= 4       # each batch's flush checked this client's limit (INFO's own reply too)
        c.config_set("client-output-buffer-limit", "normal 0 0 0 replica 0 0 0 pubsub 0 0 0")
        assert _limits(served)["output_limits"] == OUTPUT_LIMITS_NONE
        del checks[:]
        assert _core_runs(c, 4)
        assert checks == []
    finally:
        c.config_set("client-output-buffer-limit", was)
        served.loop(undo)
    assert _limits(served)["output_limits"] == OUTPUT_LIMITS_SPECIAL
    del checks[:]
    assert _core_runs(c, 4) and checks == []


# -- the state's own rules ----------------------------------------------------------------------------------

def test_every_input_is_tested():
    """Each reason, container and limit the core reads has a test above that flips it."""
    flipped = {"admission", "observer", "watchers", "access", "stats_off", "clock", "refusing", "no_expire",
               "hide_expired", "gate", "deleted", "own_feed", "routing", "moving", "unbound"}
    assert flipped == set(REASONS) | set(CONTAINERS)
    limits = {"threshold_us", "request_limit", "reply_limit", "output_limits"}
    assert limits == set(LIMITS) == set(CoreState.__slots__) - {"may_run", "blocked", "gate", "slot_codes",
                                                                  "lru_stamp", "clock"} - set(CONTAINERS)


def test_unbound_until_the_server_builds_its_core():
    """A pipeline's state runs nothing until the keyspace, the durability layer and the hooks publish to it;
    a keyspace serves one core."""
    ks = Keyspace()
    ks.lru_tick()                  # (the server's cron's first tick: until then access times are the pipeline's)
    p = Pipeline(ks)
    assert p.core_state.reasons() == ["unbound"] and p.core_state.may_run is False
    p.bind_core_state(p.durability, None)
    assert p.core_state.reasons() == [] and p.core_state.may_run is True
    ks.expire_enabled = False
    assert p.core_state.reasons() == ["no_expire"]
    with pytest.raises(ValueError, match="another"):
        Pipeline(ks).bind_core_state(p.durability, None)


# -- per connection: the session's flags, folded into core_block ------------------------------------------

# each flag of the session the core used to read one by one, and a value that sends requests to the pipeline
SESSION_FLAGS = {"authenticated": False, "in_multi": True, "special": True, "reply_off": True, "reply_skip": 1,
                 "asking": True, "decoded": (b"payload", None), "close_after_reply": True}
GATED_FLAGS = {"capa_redirect": True, "from_primary": True}


@pytest.mark.parametrize("flag", sorted(SESSION_FLAGS))
def test_a_session_flag_stops_the_core_for_that_client(served, flag):
    """Setting the flag (as the command that sets it does: an attribute write) folds it into core_block at once,
    and the core leaves the client's next batch to the pipeline; clearing it lets the core run again."""
    server = served.server

    def probe():
        (conn,) = server.clients.values()
        session = conn.session
        old = getattr(session, flag)
        setattr(session, flag, SESSION_FLAGS[flag])
        try:
            return session.core_block & CORE_BLOCK_ALWAYS, _probe(server)
        finally:
            setattr(session, flag, old)
    assert served.loop(probe) == (CORE_BLOCK_ALWAYS, (0, 1))
    assert served.loop(lambda: next(iter(server.clients.values())).session.core_block) == 0
    wait_until(lambda: _core_runs(served.c), 10, what="the core runs GET again")


@pytest.mark.parametrize("flag", sorted(GATED_FLAGS))
def test_a_gated_session_flag_stops_the_core_under_a_gate(served, flag):
    """CLIENT CAPA redirect and the REPLICAOF link's session matter where a role gate decides: with one, the core
    leaves the client's batches to admission; without one they are like any client's."""
    server = served.server
    p = server.pipeline

    def probe():
        (conn,) = server.clients.values()
        session = conn.session
        setattr(session, flag, GATED_FLAGS[flag])
        p.gate = _MemberGate()
        try:
            return session.core_block, _probe(server)
        finally:
            p.gate = None
            setattr(session, flag, False)
    assert served.loop(probe) == (CORE_BLOCK_GATED, (0, 1))
    wait_until(lambda: _core_runs(served.c), 10, what="the core runs GET again")


def test_multi_exec_through_the_pipeline(served):
    """MULTI sets in_multi through its setter: the queued GET and EXEC are the pipeline's, then the core runs."""
    c = served.c
    before = _core_count(c)
    assert c.execute_command("MULTI") in (b"OK", "OK", True)
    assert served.loop(lambda: next(iter(served.server.clients.values())).session.core_block) == CORE_BLOCK_ALWAYS
    assert c.execute_command("GET", "k") in (b"QUEUED", "QUEUED")
    assert c.execute_command("EXEC") == [b"v"]
    assert _core_count(c) == before
    assert served.loop(lambda: next(iter(served.server.clients.values())).session.core_block) == 0
    wait_until(lambda: _core_runs(c), 10, what="the core runs GET after EXEC")


def test_core_block_is_every_flag_folded():
    """For every combination of the ten flags, core_block is what the core's old ten reads decided."""
    import itertools
    flags = {**SESSION_FLAGS, **GATED_FLAGS}
    session = Session()
    cleared = {name: getattr(session, name) for name in flags}
    assert session.core_block == 0
    for on in itertools.product((False, True), repeat=len(flags)):
        for (name, value), set_it in zip(flags.items(), on):
            setattr(session, name, value if set_it else cleared[name])
        always = any(set_it for name, set_it in zip(flags, on) if name in SESSION_FLAGS)
        gated = any(set_it for name, set_it in zip(flags, on) if name in GATED_FLAGS)
        block = session.core_block
        assert bool(block & CORE_BLOCK_ALWAYS) == always
        assert bool(block & CORE_BLOCK_GATED) == gated
        assert bool(block & CORE_BLOCK_UNAUTHENTICATED) == (not session.authenticated)
        assert bool(block & CORE_BLOCK_SPECIAL) == bool(session.special)
