"""The old name of helpers/clusters.py, kept so a test that imports `nats_fixtures` keeps working: importing this module
gives helpers.clusters itself (one module object, so its fixtures and state are not duplicated)."""

import sys

from helpers import clusters

sys.modules[__name__] = clusters
