"""The old name of helpers/replay.py, kept so a test that imports `replay_util` keeps working: importing this module
gives helpers.replay itself (one module object, so its fixtures and state are not duplicated)."""

import sys

from helpers import replay

sys.modules[__name__] = replay
