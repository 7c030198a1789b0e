"""ACL SETUSER GETUSER DELUSER LIST USERS WHOAMI CAT LOG DRYRUN GENPASS SAVE LOAD HELP (Valkey 7+/8.0).

The users and the log are the server's (server/acl.py); handlers reach them only through users_of(ctx), the
one port. The rules, the check and every rendering are in the acl_*.py modules (acl_store: the users,
acl_check: the check, acl_universe: the commands and categories, ...).
"""

from ... import messages
from ...errors import CommandError
from ...protocol.resp import OK
from . import check as acl_check, passwords as acl_passwords, universe as acl_universe
from .. import registry
from ..base import parse_int
from ..registry import command
from ..specs import SPEC


def users_of(ctx):
    """The server's users (server/acl.py ServerAcl) through the handler services; None without a server."""
    return ctx.services.acl_users()


def _acl(ctx):
    acl = users_of(ctx)
    if acl is None:
        raise CommandError(messages.ACL_NO_SERVER)
    return acl


def _syntax(args):
    return CommandError(messages.SUBCOMMAND_SYNTAX.format(args[1].decode("utf-8", "replace"), "ACL"))


@command("acl|setuser")
def acl_setuser(ctx, args):
    acl = _acl(ctx)
    error = acl.setuser(args[2], list(args[3:]), ctx.client)
    if error is not None:
        raise CommandError(error)
    return acl.after_change(OK)


@command("acl|deluser")
def acl_deluser(ctx, args):
    acl = _acl(ctx)
    if any(name == b"default" for name in args[2:]):
        raise CommandError(messages.ACL_DEFAULT_NOT_REMOVABLE)
    deleted = acl.deluser(args[2:], ctx.client)
    return acl.after_change(deleted) if deleted else 0


@command("acl|getuser")
def acl_getuser(ctx, args):
    u = _acl(ctx).users.get(args[2])
    return None if u is None else u.getuser_reply()


@command("acl|list")
def acl_list(ctx, args):
    return [u.list_line() for u in _acl(ctx).users.sorted_users()]


@command("acl|users")
def acl_users(ctx, args):
    return _acl(ctx).users.names()


@command("acl|whoami")
def acl_whoami(ctx, args):
    u = ctx.client.acl_user
    return b"default" if u is None else u.name


@command("acl|load")
def acl_load(ctx, args):
    acl = _acl(ctx)
    error = acl.load(ctx.client)
    if error is not None:
        raise CommandError(error)
    return acl.after_change(OK)


@command("acl|save")
def acl_save(ctx, args):
    error = _acl(ctx).save()
    if error is not None:
        raise CommandError(error)
    return OK


@command("acl|cat")
def acl_cat(ctx, args):
    if len(args) == 2:
        return [c.encode() for c in acl_universe.CATEGORIES]
    if len(args) != 3:
        raise _syntax(args)
    category = args[2].decode("utf-8", "replace").lower()
    if category not in acl_universe.CATEGORY_MEMBERS:
        raise CommandError(messages.ACL_UNKNOWN_CATEGORY.format(args[2][:128].decode("utf-8", "replace")))
    return [name.encode() for name in acl_universe.CATEGORY_MEMBERS[category]]


@command("acl|genpass")
def acl_genpass(ctx, args):
    if len(args) > 3:
        raise _syntax(args)
    bits = parse_int(args[2]) if len(args) == 3 else 256
    if bits <= 0 or bits > acl_passwords.GENPASS_MAX_BITS:
        raise CommandError(messages.ACL_GENPASS_BITS)
    return acl_passwords.genpass(bits, _acl(ctx).random_bytes)


@command("acl|log")
def acl_log(ctx, args):
    acl = _acl(ctx)
    if len(args) > 3:
        raise _syntax(args)
    count = 10
    if len(args) == 3:
        if args[2].lower() == b"reset":
            acl.log.reset()
            return OK
        count = max(parse_int(args[2]), 0)
    return acl.log.reply(count, ctx.now_ms())


@command("acl|dryrun")
def acl_dryrun(ctx, args):
    acl = _acl(ctx)
    user = acl.users.get(args[2])
    if user is None:
        raise CommandError(messages.ACL_DRYRUN_NO_USER.format(args[2].decode("utf-8", "replace")))
    argv = args[3:]
    cmd = _lookup_any(argv)
    if cmd is None:
        raise CommandError(messages.ACL_DRYRUN_NO_COMMAND.format(args[3].decode("utf-8", "replace")))
    n = len(argv)
    if (cmd.arity > 0 and cmd.arity != n) or n < -cmd.arity:
        raise CommandError(messages.WRONG_ARITY.format(cmd.fullname))
    denied = acl_check.check(user, cmd, argv, (ctx.client.db_id, len(ctx.keyspace.dbs)))
    if denied is None:
        return OK
    reason, pos = denied
    return acl_check.denial_message(reason, user, cmd, argv[pos], verbose=True).encode()


_SPEC_ONLY = {}  # fullname -> Command, for Valkey commands durakv does not implement (DRYRUN still answers)


def _lookup_any(argv):
    """lookupCommand over Valkey's whole table: the implemented entry when there is one."""
    name = argv[0].lower().decode("utf-8", "replace")
    spec = SPEC.get(name)
    if spec is None:
        return None
    subs = spec.get("subcommands")
    if len(argv) == 1 or not subs:
        sub = None
    else:
        sub = argv[1].lower().decode("utf-8", "replace")
        if sub not in subs:
            return None
    full = name if sub is None else name + "|" + sub
    cmd = registry.find(full.encode())
    if cmd is not None:
        return cmd
    cmd = _SPEC_ONLY.get(full)
    if cmd is None:
        parent = None
        if sub is not None:
            parent = registry.find(name.encode()) or _SPEC_ONLY.get(name) or registry.Command(name, spec)
            _SPEC_ONLY.setdefault(name, parent)
        cmd = _SPEC_ONLY[full] = registry.Command(full, subs[sub] if sub is not None else spec, parent=parent)
    return cmd


_HELP = (
    b"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CAT [<category>]",
    b"    List all commands that belong to <category>, or all command categories",
    b"    when no category is specified.",
    b"DELUSER <username> [<username> ...]",
    b"    Delete a list of users.",
    b"DRYRUN <username> <command> [<arg> ...]",
    b"    Returns whether the user can execute the given command without executing the command.",
    b"GETUSER <username>",
    b"    Get the user's details.",
    b"GENPASS [<bits>]",
    b"    Generate a secure 256-bit user password. The optional `bits` argument can",
    b"    be used to specify a different size.",
    b"LIST",
    b"    Show users details in config file format.",
    b"LOAD",
    b"    Reload users from the ACL file.",
    b"LOG [<count> | RESET]",
    b"    Show the ACL log entries.",
    b"SAVE",
    b"    Save the current config to the ACL file.",
    b"SETUSER <username> <attribute> [<attribute> ...]",
    b"    Create or modify a user with the specified attributes.",
    b"USERS",
    b"    List all the registered usernames.",
    b"WHOAMI",
    b"    Return the current connection username.",
    b"HELP",
    b"    Print this help.",
)


@command("acl|help")
def acl_help(ctx, args):
    return list(_HELP)
