"""The old name of helpers/lua.py, kept so a test that imports `lua_util` keeps working: importing this module
gives helpers.lua itself (one module object, so its fixtures and state are not duplicated)."""

import sys

from helpers import lua

sys.modules[__name__] = lua
