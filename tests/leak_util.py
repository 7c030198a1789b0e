"""The old name of helpers/leaks.py, kept so a test that imports `leak_util` keeps working: importing this module
gives helpers.leaks itself (one module object, so its fixtures and state are not duplicated)."""

import sys

from helpers import leaks

sys.modules[__name__] = leaks
