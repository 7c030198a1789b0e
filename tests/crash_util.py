"""The old name of helpers/crash.py, kept so a test that imports `crash_util` keeps working: importing this module
gives helpers.crash itself (one module object, so its fixtures and state are not duplicated)."""

import sys

from helpers import crash

sys.modules[__name__] = crash
