"""The examples in the docstrings of the store, the config and the client run and pass.

Every module of ``pyrmq.client`` is run; examples that need a server are marked
``# doctest: +SKIP``. The modules listed in ``MUST_HAVE_EXAMPLES`` must also have at least one
example that runs.
"""

import doctest
import importlib
import pkgutil

import pytest

import pyrmq.client

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
CLIENT_MODULES = sorted(
    m.name for m in pkgutil.iter_modules(pyrmq.client.__path__, "pyrmq.client.")
)
MODULES = sorted(MUST_HAVE_EXAMPLES | set(CLIENT_MODULES))


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    if module in MUST_HAVE_EXAMPLES:
        assert result.attempted > 0
    assert result.failed == 0
