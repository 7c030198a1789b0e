"""The operator's passwords: the random ones durakv makes, and the one reader of --pass / --pass-file /
DURAKV_AUTH that every tool and `durakv cluster` share. Kept apart from secrets.py (the secrets directory, its
NATS keys and identities), whose imports a tool that only takes a password need not pay for."""

import os
import secrets as _random


class SecretsError(Exception):
    """A secrets directory, or a password file, that cannot be used (secrets.py raises it too)."""


def new_password(nbytes=24, token=None) -> str:
    """A random password of URL-safe characters (``nbytes`` random bytes) that never starts with '-': operators
    pass it after an option (`--pass`, `-a`), and a parser such as Python's argparse takes a leading '-' for the
    next option ("expected one argument"), one password in 64 of token_urlsafe's."""
    while True:
        password = (token or _random.token_urlsafe)(nbytes)
        if not password.startswith("-"):
            return password


PASSWORD_ENV = "DURAKV_AUTH"
PASS_FILE_MAX_BYTES = 64 * 1024     # a password file is read whole: bounded, as any input


def add_password_options(group, prefix="", who="its", aliases=()):
    """--PREFIXpass (also --PREFIXpassword) and --PREFIXpass-file on an argparse group, read by
    `password_from`. The file keeps the secret out of argv, where `ps` shows it to every user of the machine."""
    dash = prefix.replace("_", "-")
    env = " or %s" % PASSWORD_ENV if not prefix else ""
    group.add_argument(*aliases, "--%spass" % dash, "--%spassword" % dash, dest=prefix + "password", default=None,
                       help="%s password (visible to `ps`: prefer --%spass-file%s)" % (who, dash, env))
    group.add_argument("--%spass-file" % dash, dest=prefix + "pass_file", default=None, metavar="FILE",
                       help="a file holding %s password (its first line)" % who)


def password_from(args, prefix=""):
    """The password an operator gave: --PREFIXpass, else --PREFIXpass-file's first line, else (no prefix) the
    DURAKV_AUTH environment variable, else None. Raises SecretsError for an unreadable or oversized file."""
    value = getattr(args, prefix + "password", None)
    if value:
        return value
    path = getattr(args, prefix + "pass_file", None)
    if path:
        try:
            with open(path, "rb") as f:
                data = f.read(PASS_FILE_MAX_BYTES + 1)
        except OSError as exc:
            raise SecretsError("cannot read the password file %s: %s" % (path, exc.strerror or exc)) from None
        if len(data) > PASS_FILE_MAX_BYTES:
            raise SecretsError("the password file %s is over %d bytes" % (path, PASS_FILE_MAX_BYTES))
        first = (data.decode("utf-8", "surrogateescape").splitlines() or [""])[0].strip()
        if not first:
            raise SecretsError("the password file %s holds no password" % path)
        return first
    return (os.environ.get(PASSWORD_ENV) or None) if not prefix else None
