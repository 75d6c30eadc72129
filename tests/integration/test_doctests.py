"""The examples in the store's and config's docstrings run and pass."""

import doctest
import importlib

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("module", ["pyrmq.store.message_store", "pyrmq.store", "pyrmq.config"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
