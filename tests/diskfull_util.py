"""The old name of helpers/diskfull.py, kept so a test that imports `diskfull_util` keeps working: importing this module
gives helpers.diskfull itself (one module object, so its fixtures and state are not duplicated)."""

import sys

from helpers import diskfull

sys.modules[__name__] = diskfull
