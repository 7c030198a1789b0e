"""The compiled core is required where it can be built: scripts/check_core.py (run by scripts/test.sh) fails when
it did not build, and a CPython private API it uses that is gone or changed fails its build, loudly."""

import ast
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from conftest import ROOT   # the repository, wherever this file sits under tests/
SRC = os.path.join(ROOT, "src")
CORE_C = os.path.join(SRC, "durakv", "fastpath", "_core.c")


def _check_core(pythonpath, pure=None):
    env = {k: v for k, v in os.environ.items() if k != "DURAKV_PURE_PYTHON"}
    env["PYTHONPATH"] = pythonpath
    if pure is not None:
        env["DURAKV_PURE_PYTHON"] = pure
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "check_core.py")], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def src_without_core(tmp_path):
    """A copy of the package as pip leaves it where no C compiler was found: the sources, no _core*.so."""
    shutil.copytree(os.path.join(SRC, "durakv"), tmp_path / "durakv",
                    ignore=shutil.ignore_patterns("_core*.so", "__pycache__"))
    return str(tmp_path)


def test_check_core_fails_without_the_compiled_core(src_without_core):
    res = _check_core(src_without_core)
    assert res.returncode == 1
    assert "the compiled core is missing" in res.stderr
    assert "was not built at install time" in res.stderr


def test_check_core_accepts_the_pure_python_core_when_asked(src_without_core):
    res = _check_core(src_without_core, pure="1")
    assert res.returncode == 0, res.stderr
    assert "the python core" in res.stdout


def test_check_core_passes_with_the_compiled_core():
    # (run without DURAKV_PURE_PYTHON, whatever this test process runs: the core built here must load)
    res = _check_core(SRC)
    assert res.returncode == 0, res.stderr
    assert "the compiled core" in res.stdout


def _core_compile_args():
    """setup.py's extra_compile_args for durakv.fastpath._core (read, not run: setup.py calls setup())."""
    with open(os.path.join(ROOT, "setup.py")) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Extension"
                and ast.literal_eval(node.args[0]) == "durakv.fastpath._core"):
            for kw in node.keywords:
                if kw.arg == "extra_compile_args":
                    return ast.literal_eval(kw.value)
    raise AssertionError("setup.py builds no durakv.fastpath._core")


def _compile(tmp_path, flags, gone):
    """Compiles _core.c against a CPython whose headers no longer declare `gone`: a Python.h in front of the
    real one that renames it after the real one declared it."""
    shadow = tmp_path / "include"
    shadow.mkdir(exist_ok=True)
    (shadow / "Python.h").write_text("#include_next <Python.h>\n#define %s durakv_gone%s\n" % (gone, gone))
    cc = sysconfig.get_config_var("CC") or "cc"
    cmd = cc.split() + ["-c", "-fPIC", "-I", str(shadow), "-I", sysconfig.get_paths()["include"], *flags, CORE_C,
                        "-o", str(tmp_path / "core.o")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None,
                    reason="no C compiler")
@pytest.mark.parametrize("name", ["_PyType_Lookup", "_PyBytes_Join", "_PyList_Extend"])
def test_a_cpython_private_api_gone_fails_the_build(tmp_path, name):
    res = _compile(tmp_path, _core_compile_args(), name)
    assert res.returncode != 0
    # (without the guard a call to an undeclared function is only gcc's warning: a module that fails at import
    # with an undefined symbol, and a server that quietly runs its pure-Python core)
    assert "durakv_gone" + name in res.stderr
