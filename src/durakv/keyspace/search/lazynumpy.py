"""numpy, loaded on first use. Every server and CLI process imports the search modules (the command table holds
FT.*), and importing numpy took 40 ms of each start (a quarter of the server's import, measured with
`python -X importtime`); only a server that indexes or queries vectors needs it. importlib's LazyLoader runs
numpy's import at the first attribute read instead."""

import importlib.util
import sys


def _lazy(name):
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ImportError(f"No module named {name!r}")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


np = _lazy("numpy")
