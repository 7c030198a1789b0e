"""The compiled core (fastpath/_core.c), or None where it is not built or DURAKV_PURE_PYTHON=1 asks for the
pure-Python modules, which are the reference semantics and the fallback.

`core` is the extension module or None; `NAME` says which runs ("compiled" or "python"), as `INFO server`'s
`durakv_core` and the server's start-up log line report it.
"""

import logging
import os

log = logging.getLogger("durakv.fastpath")

core = None
NAME = "python"
REASON = "DURAKV_PURE_PYTHON=1"
if os.environ.get("DURAKV_PURE_PYTHON", "") not in ("1", "true", "yes"):
    try:
        from . import _core as core
        NAME = "compiled"
        REASON = ""
    except ImportError as exc:   # no C compiler at install time: pip built the package without it
        core = None
        REASON = ("the compiled core (durakv/fastpath/_core.c) was not built at install time (%s); install gcc "
                  "and the Python headers, then reinstall durakv, for the compiled one" % exc)


def warn_if_missing():
    """One warning at server start when the compiled core was expected but is not there."""
    if core is None and REASON != "DURAKV_PURE_PYTHON=1":
        log.warning("durakv runs its pure-Python core: %s", REASON)


def install():
    """Puts the compiled parser, effect encoder and Outbox API in place (the protocol, journal and durability
    layers cannot import this one: it hands them in). Idempotent; a no-op without the compiled core."""
    if core is None:
        return
    from ..durability import release
    from ..journal import codec
    from ..protocol import parser, resp
    parser.use_compiled(core.parse)
    codec.use_compiled(core.encode_effects, core.effects_size)
    release.use_compiled(core.outbox_methods(release.Outbox, resp.Deferred))


def core_commands():
    """{name: Command} the compiled batch loop may run: the command table's own choice (@command(..., core=True),
    commands/registry.py), with the table's names and arities."""
    from ..commands import registry
    return {name.decode(): cmd for name, cmd in registry.TABLE.items()
            if cmd.core and cmd.handler is not None and not cmd.subcommands}


def batch_core(pipeline, durability, hooks):
    """The compiled batch loop over one server's pipeline, or None without the compiled core. Either way the
    keyspace, `durability` and `hooks` publish their inputs to the pipeline's core state from now on
    (commands/corestate.py): the one object the core reads its decision to run from."""
    pipeline.bind_core_state(durability, hooks)
    if core is None:
        return None
    import collections
    from ..commands.pipeline import STRING_KEY_COST
    from ..keyspace.db import estimate_key
    install()
    commands = core_commands()
    return core.Core(pipeline.core_state, pipeline, pipeline.keyspace, durability, pipeline.monitors,
                     commands, STRING_KEY_COST, estimate_key, collections.deque)
