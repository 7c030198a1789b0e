"""Every command's facts in one table: Valkey 9.1.2's own (spec.py, generated), durakv's own (spec_durakv.py:
the cluster membership words of the operator's tools) and the commands of the valkey-bundle modules durakv
serves natively (one `spec_<module>.py` each, written from the module's own command table).

A module file exports MODULE ({"name", "ver", "path", "args"}: its MODULE LIST entry, as Valkey shows the
module), CATEGORIES (the ACL categories the module adds, as ValkeyModule_AddACLCategory does) and SPEC (its
commands, in spec.py's shape). Adding a module is one import line below.
"""

from . import spec_bloom, spec_durakv, spec_json, spec_search
from .spec import SPEC as VALKEY_SPEC

# each module's facts, in MODULE LIST order (valkey-bundle loads libjson.so, libsearch.so, libvalkey_bloom.so)
_MODULE_FILES = (spec_json, spec_search, spec_bloom)


def _merge():
    spec = dict(VALKEY_SPEC)
    spec.update(spec_durakv.SPEC)
    modules, categories = [], []
    for m in _MODULE_FILES:
        for name, entry in m.SPEC.items():
            if name in spec:
                raise ValueError("module %s redefines command %s" % (m.MODULE["name"], name))
            spec[name] = entry
        modules.append(dict(m.MODULE))
        categories.extend(c for c in m.CATEGORIES if c not in categories)
    return spec, tuple(modules), tuple(categories)


SPEC, MODULES, MODULE_CATEGORIES = _merge()
