"""The old name of helpers/netns.py, kept so a test that imports `netns_util` keeps working: importing this module
gives helpers.netns itself (one module object, so its fixtures and state are not duplicated)."""

import sys

from helpers import netns

sys.modules[__name__] = netns
