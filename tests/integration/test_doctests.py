"""The examples in the docstrings of pyrmq's modules run and pass.

Every module is run but the Spark source's (``tests/spark`` runs those, with pyspark) and the
generated protocol code; examples that need a server are marked ``# doctest: +SKIP``. The
modules listed in ``MUST_HAVE_EXAMPLES`` must also have at least one example that runs.
"""

import doctest
import importlib
import pkgutil

import pytest

import pyrmq

pytestmark = pytest.mark.integration

MUST_HAVE_EXAMPLES = {
    "pyrmq.store.message_store",
    "pyrmq.store",
    "pyrmq.config",
    "pyrmq.namespace",
    "pyrmq.client",
    "pyrmq.client.aio",
    "pyrmq.client.blocking",
    "pyrmq.client.exceptions",
    "pyrmq.client.runtime",
}
ALL_MODULES = {
    m.name
    for m in pkgutil.walk_packages(pyrmq.__path__, "pyrmq.")
    if not m.name.startswith(("pyrmq.spark", "pyrmq.proxy.proto")) and m.name != "pyrmq.__main__"
}
MODULES = sorted(MUST_HAVE_EXAMPLES | ALL_MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    if module in MUST_HAVE_EXAMPLES:
        assert result.attempted > 0
    assert result.failed == 0
