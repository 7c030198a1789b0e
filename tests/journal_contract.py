"""The old name of helpers/journal_contract.py, kept so a test that imports `journal_contract` keeps working: importing this module
gives helpers.journal_contract itself (one module object, so its fixtures and state are not duplicated)."""

import sys

from helpers import journal_contract

sys.modules[__name__] = journal_contract
