"""The old name of helpers/wire.py, kept so a test that imports `wire_util` keeps working: importing this module
gives helpers.wire itself (one module object, so its fixtures and state are not duplicated)."""

import sys

from helpers import wire

sys.modules[__name__] = wire
