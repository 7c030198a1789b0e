"""Lua scripting: EVAL scripts and FUNCTION libraries on a real Lua 5.1 interpreter (lupa).

Modules:
    prelude.py    the Lua side of the sandbox (globals, read-only proxies, server.*, cjson, bit, hooks)
    lua.py        LuaEngine: one Lua state, Lua <-> reply conversions, the Python callbacks
    runner.py     ScriptRun (server.call with script rules), the worker thread, BUSY / SCRIPT KILL
    functions.py  function libraries per keyspace, FUNCTION DUMP/RESTORE payloads

Design of long-running scripts. Command handlers are synchronous and the event loop is blocked while one
runs, yet a script past busy-reply-threshold must let other clients get -BUSY and SCRIPT KILL. So Lua
runs on a worker thread (one per server; scripts never overlap) while the loop thread waits for it, at
most busy-reply-threshold: up to then the loop is parked in the handler and the worker runs server.call
commands directly, exactly as if the handler had run them. Past it the handler returns a Deferred and the
loop serves again; every later server.call is executed on the loop thread (the worker hands it over and
waits), so server state is only ever touched by one thread at a time. While the script is in that
state the pipeline answers other clients -BUSY (pipeline.busy), queues the calling client's own
commands behind the script, and active expiry pauses; SCRIPT KILL / FUNCTION KILL set a flag a Lua count
hook polls every 100000 instructions. Inside MULTI/EXEC, with no host (start-up replay, tests on a bare
pipeline) or with busy-reply-threshold 0, scripts run inline on the calling thread.

This package never imports commands/: server.call reaches the pipeline only through the ScriptCalls the
pipeline hands it (runner.py).

Effects: the commands a script runs record their own deterministic effects; they are collected in order
and leave as the script command's effects (one journal batch), so replay never runs Lua for EVAL.
FUNCTION LOAD/DELETE/FLUSH/RESTORE propagate themselves and snapshots store FUNCTION LOAD commands, so
libraries survive restarts.
"""

from .functions import Functions, get_functions
from .runner import ScriptingState

__all__ = ["Functions", "ScriptingState", "get_functions"]
